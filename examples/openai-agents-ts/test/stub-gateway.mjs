// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// A stand-in for agentrun-gateway's two doors on one loopback port, for the
// agent's offline tests:
//   POST /v1/responses         a scripted Responses endpoint (plain node:http), the
//                              SDK's default API: first a turn of function_call
//                              items, then a final answer that quotes every
//                              function_call_output it was given
//   POST /mcp                  a stateless streamable-HTTP MCP server built with
//                              @modelcontextprotocol/sdk (server side), whose tools
//                              have the catalogue's dotted names; GET/DELETE → 405
//   GET  /agentrun/v1/self     {"goal": ...}
//   POST /agentrun/v1/self/finish, /agentrun/v1/self/settle   (with AGENTRUN_SETTLE=1, the agent's last two requests)
// over HTTP, or HTTPS with a given key and certificate.
// Every request must carry `Authorization: Bearer <the token file's contents>`
// (checked against the file as it is when the request arrives; else 401); the
// stub records what it saw for the tests.
// @ts-check
import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

/** The catalogue's tools, as the gateway's MCP door lists them. */
export const catalogue = [
  {
    name: 'notes.write',
    description: "Append to the run's working notes.",
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
  },
  {
    name: 'report.publish',
    description: 'Publish a section of the report.',
    inputSchema: {
      type: 'object',
      properties: { section: { type: 'string' }, content: { type: 'string' } },
      required: ['section', 'content'],
    },
  },
  {
    name: 'http.get',
    description: 'Fetch a page from an allow-listed host.',
    inputSchema: { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] },
  },
];

/** What the model door's 429 refusal looks like. */
export const grantExhausted = {
  error: {
    type: 'rate_limit_error',
    code: 'grant_exhausted',
    param: null,
    message: 'working budget exhausted at 4/4 model requests of this attempt; the operator finalizes the run from its reserve or ends it',
  },
};

/** A function_call_output item's output as text (a string, or content parts). @param {any} item */
export const outputText = (item) => (typeof item.output === 'string' ? item.output : JSON.stringify(item.output));

/** @param {string} name */
const functionName = (name) => name.replace(/[^a-zA-Z0-9_-]/g, '_');

/**
 * @param {object} o
 * @param {string} o.tokenFile
 * @param {'tools' | 'refuse' | 'finalize'} [o.script] tools: a turn of three tool calls, then an answer;
 *   refuse: 429 grant_exhausted, and the run ended; finalize: the first model call 429 grant_exhausted,
 *   then the run is Finalizing and the calls are answered as in tools
 * @param {number} [o.httpGetDelayMs] how long http.get takes (an approval wait, say)
 * @param {() => void} [o.afterFirstModelCall] e.g. rotate the token
 * @param {{key: string, cert: string}} [o.tls] serve HTTPS with this key and certificate
 */
export async function startStubGateway({ tokenFile, script = 'tools', httpGetDelayMs = 0, afterFirstModelCall, tls }) {
  const seen = {
    /** @type {{method: string, path: string, authorized: boolean, token: string}[]} */ requests: [],
    /** @type {any[]} Responses request bodies */ modelRequests: [],
    /** @type {string[]} MCP JSON-RPC methods, in order */ mcpMethods: [],
    /** @type {{name: string, arguments: any}[]} */ toolCalls: [],
  };

  /** @param {http.IncomingMessage} req */
  const readBody = async (req) => {
    let s = '';
    for await (const chunk of req) s += chunk;
    return s ? JSON.parse(s) : undefined;
  };
  /** @param {http.ServerResponse} res @param {number} status @param {any} body @param {Record<string, string>} [headers] */
  const json = (res, status, body, headers = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };

  const mcpServer = () => {
    const server = new Server({ name: 'stub-agentrun-gateway', version: '0.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: catalogue }));
    server.setRequestHandler(CallToolRequestSchema, async (req) => {
      const { name, arguments: args } = req.params;
      seen.toolCalls.push({ name, arguments: args });
      switch (name) {
        case 'notes.write':
          return { content: [{ type: 'text', text: `noted: ${args?.text}` }] };
        case 'report.publish':
          // A refusal: the gateway's answer to a call it will not dispatch.
          return {
            isError: true,
            content: [{ type: 'text', text: 'approval_denied: the approver said Deny for "report.publish-3f9a0c1d2e4b5a69": not yet' }],
          };
        case 'http.get':
          await new Promise((r) => setTimeout(r, httpGetDelayMs));
          return { content: [{ type: 'text', text: `<html>page at ${args?.url}</html>` }] };
        default:
          return { isError: true, content: [{ type: 'text', text: `unknown_tool: ${name} is not in the policy's catalogue` }] };
      }
    });
    return server;
  };

  /**
   * The Responses API's answer (the SDK's default API): a turn of
   * function_call items, then a message quoting every function_call_output.
   * @param {any} body
   */
  const responsesAnswer = (body) => {
    const n = seen.modelRequests.length;
    const base = { id: `resp_${n}`, object: 'response', created_at: 0, status: 'completed', model: body.model };
    const usage = {
      input_tokens: 10, output_tokens: 5, total_tokens: 15,
      input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 },
    };
    const input = Array.isArray(body.input) ? body.input : [];
    const results = input.filter((/** @type {any} */ it) => it.type === 'function_call_output');
    if (results.length === 0) {
      const offered = (body.tools ?? []).map((/** @type {any} */ t) => t.name);
      const pick = (/** @type {string} */ mcpName) =>
        offered.find((/** @type {string} */ n) => n === mcpName) ?? offered.find((/** @type {string} */ n) => functionName(n) === functionName(mcpName)) ?? mcpName;
      const calls = [
        ['notes.write', { text: 'vector databases replicate with Raft' }],
        ['report.publish', { section: 'Findings', content: 'Raft, mostly.' }],
        ['http.get', { url: 'https://example.org/replication' }],
      ];
      return {
        ...base, usage,
        output: calls.map(([name, args], i) => ({
          type: 'function_call', id: `fc_${i}`, call_id: `call_${i}`, status: 'completed',
          name: pick(/** @type {string} */ (name)), arguments: JSON.stringify(args),
        })),
      };
    }
    const quoted = results.map((/** @type {any} */ it) => `[${it.call_id}] ${outputText(it)}`).join('\n');
    return {
      ...base, usage,
      output: [{
        type: 'message', id: `msg_${n}`, role: 'assistant', status: 'completed',
        content: [{ type: 'output_text', text: `FINAL ANSWER\n${quoted}`, annotations: [] }],
      }],
    };
  };

  /** @type {http.RequestListener} */
  const handler = async (req, res) => {
    try {
      const path = new URL(req.url ?? '/', 'http://stub').pathname;
      const token = readFileSync(tokenFile, 'utf8').trim();
      const got = (req.headers.authorization ?? '').replace(/^Bearer /, '');
      const authorized = got === token;
      seen.requests.push({ method: req.method ?? '', path, authorized, token: got });
      if (!authorized) {
        return json(res, 401, { error: { type: 'authentication_error', code: 'invalid_token', message: 'no token, or not one for audience agentrun-gateway', param: null } }, { 'x-should-retry': 'false' });
      }
      if (path === '/mcp') {
        if (req.method !== 'POST') {
          res.writeHead(405, { allow: 'POST' }).end();
          return;
        }
        const body = await readBody(req);
        for (const m of [body].flat()) seen.mcpMethods.push(m.method ?? 'response');
        // Stateless: a fresh server and transport for every POST.
        const s = mcpServer();
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
        res.on('close', () => { transport.close(); s.close(); });
        await s.connect(transport);
        await transport.handleRequest(req, res, body);
        return;
      }
      if (path === '/agentrun/v1/self' && req.method === 'GET') {
        // refuse: the run ended; finalize: Finalizing once the grant was refused.
        const phase = script === 'refuse' ? { phase: 'Terminated' }
          : script === 'finalize' && seen.modelRequests.length > 0 ? { phase: 'Finalizing', finalizing: true } : { phase: 'Running' };
        return json(res, 200, { run: 'stub-run', goal: 'Compare the replication models of open-source vector databases.', ...phase });
      }
      if (path === '/agentrun/v1/self/finish' && req.method === 'POST') {
        return json(res, 200, { run: 'stub-run', finishProposed: true });
      }
      if (path === '/agentrun/v1/self/settle' && req.method === 'POST') {
        return json(res, 200, { settlement: 'Complete', blocksPlanned: 1, blocksCommitted: 1 });
      }
      if (path === '/v1/responses' && req.method === 'POST') {
        const body = await readBody(req);
        seen.modelRequests.push(body);
        if (seen.modelRequests.length === 1) afterFirstModelCall?.();
        if (script === 'refuse' || (script === 'finalize' && seen.modelRequests.length === 1)) {
          return json(res, 429, grantExhausted, { 'x-should-retry': 'false' });
        }
        return json(res, 200, responsesAnswer(body));
      }
      json(res, 404, { error: { type: 'not_found_error', code: 'not_found', message: `no route ${req.method} ${path}`, param: null } });
    } catch (e) {
      if (!res.headersSent) json(res, 500, { error: { type: 'server_error', code: 'stub', message: String(e), param: null } });
    }
  };
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', () => r(undefined)));
  const addr = /** @type {import('node:net').AddressInfo} */ (server.address());
  return {
    url: `${tls ? 'https' : 'http'}://127.0.0.1:${addr.port}`,
    seen,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r(undefined)); }),
  };
}
