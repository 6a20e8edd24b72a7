// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// The official MCP TypeScript SDK (@modelcontextprotocol/sdk) against
// agentrun's tool door. Run by test/mcpinterop (go test), once per protocol
// revision:
//
//   node client.mjs URL TOKEN REVISION
//
// prints one JSON object: the negotiated revision, the listed tools, and the
// result of each scenario call (search, a refused call, a call that waits
// for approval, a call the tool server never answers). A step that throws is
// reported as {"error": ...} so the Go test names what failed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/sdk/types.js";

const [url, token, revision] = process.argv.slice(2);

if (!SUPPORTED_PROTOCOL_VERSIONS.includes(revision)) {
  console.log(JSON.stringify({
    skip: `@modelcontextprotocol/sdk supports ${SUPPORTED_PROTOCOL_VERSIONS.join(", ")}; not ${revision}`,
  }));
  process.exit(0);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
if (revision !== LATEST_PROTOCOL_VERSION) {
  // The client offers the SDK's newest revision; a client built when an
  // older one was newest offers that one instead.
  const send = transport.send.bind(transport);
  transport.send = (msg, opts) => {
    if (msg.method === "initialize") {
      msg = { ...msg, params: { ...msg.params, protocolVersion: revision } };
    }
    return send(msg, opts);
  };
}
const client = new Client({ name: "agentrun-mcp-interop", version: "0.1.0" });
const out = {};

async function step(name, fn) {
  try {
    out[name] = await fn();
  } catch (e) {
    out[name] = { error: String(e?.message ?? e) };
  }
}

function result(res) {
  const text = (res.content ?? []).map((c) => c.text ?? "").join("");
  return { isError: Boolean(res.isError), text, meta: res._meta ?? {} };
}

const call = (name, args) => async () => result(await client.callTool({ name, arguments: args }, undefined, { timeout: 30000 }));

await client.connect(transport);
out.protocolVersion = transport.protocolVersion;
await step("tools", async () => (await client.listTools()).tools.map((t) => t.name).sort());
await step("call", call("search", { q: "vector databases" }));
await step("refused", call("shell.exec", {}));
await step("approval", call("report.publish", { section: "Overview", content: revision }));
await step("timeout", call("ticket.create", { title: `disk full ${revision}` }));
await client.close();
console.log(JSON.stringify(out));
