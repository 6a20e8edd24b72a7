// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// agent.mjs against the gateway's protocol conformance server
// (test/conformance/server): a real agentrun-gateway in front of one attempt,
// over HTTPS with its own CA, playing the operator's part. Its model is the
// scripted upstream's default (one answer, no tool calls), so the agent
// connects to the MCP door, lists its tools, gets its final answer from the
// model door and exits 0 without calling the agent API (the operator settles
// from that exit). Needs Go, or the built server in
// $AGENTRUN_CONFORMANCE_SERVER (hack/test-clients.sh sets it).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const exampleDir = dirname(dirname(fileURLToPath(import.meta.url)));
const repoRoot = join(exampleDir, '..', '..');

async function startServer(args = []) {
  const bin = process.env.AGENTRUN_CONFORMANCE_SERVER;
  const proc = bin
    ? spawn(bin, args, { stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn('go', ['run', './test/conformance/server', ...args], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'inherit'] });
  const it = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done) throw new Error('the conformance server exited without a manifest');
  return {
    manifest: JSON.parse(first.value),
    async status() {
      proc.stdin.write('{"status":true}\n');
      return JSON.parse((await it.next()).value);
    },
    async close() {
      proc.stdin.end();
      await new Promise((resolve) => (proc.exitCode !== null ? resolve(undefined) : proc.on('exit', resolve)));
    },
  };
}

test('agent.mjs on the conformance gateway: both doors over HTTPS, then exit 0 without the agent API', async () => {
  const server = await startServer();
  try {
    const env = { ...process.env, ...server.manifest.env, AGENTRUN_MODEL: server.manifest.model };
    delete env.NODE_EXTRA_CA_CERTS; // the agent trusts $AGENTRUN_GATEWAY_CA_FILE alone
    const out = spawnSync(process.execPath, [join(exampleDir, 'agent.mjs')], { env, encoding: 'utf8', timeout: 120_000 });
    assert.equal(out.status, 0, `agent.mjs exited ${out.status}:\n${out.stdout}\n${out.stderr}`);
    assert.match(out.stdout, /agent: tools \[.*"notes\.write".*\]/);
    assert.match(out.stdout, /agent: tools \[.*"report\.publish".*\]/);
    assert.match(out.stdout, /fake upstream/); // the model door's answer
    assert.doesNotMatch(out.stdout, /agent: settled/);
    // The gateway writes the counts coalesced (within its flush interval):
    // wait for them rather than reading a status older than the exit.
    let status = {};
    for (let i = 0; i < 100 && !status.usage?.modelRequests; i++) {
      ({ status } = await server.status());
      if (!status.usage?.modelRequests) await new Promise((r) => setTimeout(r, 50));
    }
    // Nothing proposed or settled: the attempt's facts are what the doors counted.
    assert.ok(!status.finishProposed, out.stdout);
    assert.ok(!status.publication?.settled, JSON.stringify(status.publication));
    assert.equal(status.usage?.modelRequests, 1, JSON.stringify(status));
  } finally {
    await server.close();
  }
});
