// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// Runs agent.mjs, unchanged, as a child process against the stub gateway
// (test/stub-gateway.mjs): a scripted Responses door and an MCP door
// built with @modelcontextprotocol/sdk. Offline; `npm test` after `npm ci`.
// @ts-check
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { outputText, startStubGateway } from './stub-gateway.mjs';

const agentScript = join(dirname(fileURLToPath(import.meta.url)), '..', 'agent.mjs');

/** @param {Record<string, string>} env @returns {Promise<{code: number | null, stdout: string, stderr: string}>} */
function runAgent(env) {
  return new Promise((resolve, reject) => {
    const base = { ...process.env };
    for (const k of Object.keys(base)) if (/^(OPENAI_|AGENTRUN_|NODE_EXTRA_CA_CERTS$)/.test(k)) delete base[k];
    const child = spawn(process.execPath, [agentScript], { env: { ...base, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

function tokenFile() {
  const file = join(mkdtempSync(join(tmpdir(), 'agentrun-token-')), 'token');
  writeFileSync(file, 'token-1\n');
  return file;
}

test('calls the dotted MCP tools under _ names with the bearer token, gets refusals as tool results, answers', async () => {
  const file = tokenFile();
  // The kubelet rotates the projected token: every later request must carry the new one.
  const gw = await startStubGateway({ tokenFile: file, httpGetDelayMs: 1500, afterFirstModelCall: () => writeFileSync(file, 'token-2\n') });
  try {
    const r = await runAgent({
      AGENTRUN_GATEWAY_URL: gw.url,
      AGENTRUN_TOKEN_FILE: file,
      AGENTRUN_GOAL: 'Compare the replication models of open-source vector databases.',
    });
    assert.equal(r.code, 0, `agent failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /FINAL ANSWER/);
    // It printed what tools/list gave it, and ended by exiting 0: it never called the
    // agent API (the goal came from $AGENTRUN_GOAL); the operator settles from the exit.
    assert.match(r.stdout, /agent: tools \[.*"report\.publish".*\]/);
    assert.doesNotMatch(r.stdout, /agent: settled/);
    assert.deepEqual(gw.seen.requests.filter((q) => q.path.startsWith('/agentrun/')).map((q) => q.path), []);
    assert.equal(gw.seen.requests.at(-1)?.path, '/v1/responses', 'the final answer is its last request');

    // Every request, to either door, carried the token the file held at the time.
    assert.ok(gw.seen.requests.length > 0);
    for (const q of gw.seen.requests) assert.ok(q.authorized, `unauthorized ${q.method} ${q.path} with token ${q.token}`);
    const tokens = new Set(gw.seen.requests.map((q) => q.token));
    assert.deepEqual([...tokens].sort(), ['token-1', 'token-2'], 'the token file is re-read');
    assert.ok(gw.seen.requests.some((q) => q.path === '/mcp' && q.token === 'token-2'), 'MCP requests after the rotation use the new token');

    // The SDK's default, the Responses API: never Chat Completions.
    assert.ok(gw.seen.requests.every((q) => !q.path.startsWith('/v1/chat/completions')));
    assert.equal(gw.seen.modelRequests.length, 2);
    const [first, second] = gw.seen.modelRequests;
    assert.equal(first.model, 'scripted');

    // The dotted names: offered to the model with '_' (toFunctionToolName), called on MCP with '.'.
    const offered = first.tools.map((/** @type {any} */ t) => t.name).sort();
    assert.deepEqual(offered, ['http_get', 'notes_write', 'report_publish']);
    assert.deepEqual(gw.seen.toolCalls.map((c) => c.name).sort(), ['http.get', 'notes.write', 'report.publish']);
    // The replayed history names the function as the model did.
    const replayed = second.input.filter((/** @type {any} */ it) => it.type === 'function_call').map((/** @type {any} */ c) => c.name).sort();
    assert.deepEqual(replayed, ['http_get', 'notes_write', 'report_publish']);

    // The isError result reached the model as the tool's output; the run went on.
    const toolMsgs = second.input.filter((/** @type {any} */ it) => it.type === 'function_call_output');
    assert.equal(toolMsgs.length, 3);
    assert.ok(toolMsgs.some((m) => outputText(m).includes('approval_denied')), JSON.stringify(toolMsgs));
    assert.ok(toolMsgs.some((m) => outputText(m).includes('noted: vector databases')), JSON.stringify(toolMsgs));
    assert.ok(toolMsgs.some((m) => outputText(m).includes('<html>page at')), 'a 1.5 s tools/call is waited for');
    assert.match(r.stdout, /approval_denied/);

    // The MCP conversation of a stateless client.
    assert.deepEqual(gw.seen.mcpMethods.slice(0, 2), ['initialize', 'notifications/initialized']);
    assert.ok(gw.seen.mcpMethods.includes('tools/list'));
    console.log(`request fields: ${Object.keys(first).sort().join(', ')}`);
    console.log(`MCP methods: ${gw.seen.mcpMethods.join(', ')}`);
    console.log(`HTTP: ${gw.seen.requests.map((q) => `${q.method} ${q.path}`).join(', ')}`);
    console.log(`tool messages: ${JSON.stringify(toolMsgs)}`);
  } finally {
    await gw.close();
  }
});

test('AGENTRUN_SETTLE=1: proposes finish and settles through the agent API before it exits', async () => {
  const file = tokenFile();
  const gw = await startStubGateway({ tokenFile: file });
  try {
    const r = await runAgent({ AGENTRUN_GATEWAY_URL: gw.url, AGENTRUN_TOKEN_FILE: file, AGENTRUN_GOAL: 'goal', AGENTRUN_SETTLE: '1' });
    assert.equal(r.code, 0, `agent failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /agent: settled Complete \(1\/1 sections\)/);
    const api = gw.seen.requests.filter((q) => q.path.startsWith('/agentrun/')).map((q) => q.path);
    assert.deepEqual(api, ['/agentrun/v1/self/finish', '/agentrun/v1/self/settle']);
  } finally {
    await gw.close();
  }
});

test('a tools/call past the MCP timeout becomes a tool error the model sees, and the run goes on', async () => {
  const file = tokenFile();
  const gw = await startStubGateway({ tokenFile: file, httpGetDelayMs: 3000 });
  try {
    const r = await runAgent({
      AGENTRUN_GATEWAY_URL: gw.url,
      AGENTRUN_TOKEN_FILE: file,
      AGENTRUN_GOAL: 'goal',
      AGENTRUN_MCP_TIMEOUT_SECONDS: '1',
    });
    assert.equal(r.code, 0, `agent failed:\n${r.stdout}\n${r.stderr}`);
    const toolMsgs = gw.seen.modelRequests[1].input.filter((/** @type {any} */ it) => it.type === 'function_call_output');
    const timedOut = toolMsgs.find((/** @type {any} */ it) => it.call_id === 'call_2');
    assert.match(JSON.stringify(timedOut), /timed out/i);
    console.log(`timed-out tool message: ${JSON.stringify(timedOut)}`);
  } finally {
    await gw.close();
  }
});

test('a 429 grant_exhausted is not retried: the agent prints the refusal and exits 2', async () => {
  const file = tokenFile();
  const gw = await startStubGateway({ tokenFile: file, script: 'refuse' });
  try {
    // No $AGENTRUN_GOAL: the goal comes from GET /agentrun/v1/self.
    const r = await runAgent({ AGENTRUN_GATEWAY_URL: gw.url, AGENTRUN_TOKEN_FILE: file, AGENTRUN_MODEL: 'other-model' });
    assert.equal(r.code, 2, `${r.stdout}\n${r.stderr}`);
    assert.ok(gw.seen.requests.some((q) => q.path === '/agentrun/v1/self'));
    assert.match(r.stdout, /replication models/);
    assert.equal(gw.seen.modelRequests.length, 1, 'x-should-retry: false: no retry');
    assert.equal(gw.seen.modelRequests[0].model, 'other-model');
    assert.match(r.stderr, /HTTP 429 grant_exhausted: .*working budget exhausted/);
    console.log(`stderr: ${r.stderr.trim()}`);
  } finally {
    await gw.close();
  }
});

test('a 429 grant_exhausted: waits for Finalizing, runs once more from the reserve, exits 0', async () => {
  const file = tokenFile();
  const gw = await startStubGateway({ tokenFile: file, script: 'finalize' });
  try {
    const r = await runAgent({ AGENTRUN_GATEWAY_URL: gw.url, AGENTRUN_TOKEN_FILE: file, AGENTRUN_GOAL: 'goal' });
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /working grant is used up .*waiting for Finalizing/);
    assert.match(r.stdout, /FINAL ANSWER/);
    assert.ok(gw.seen.requests.some((q) => q.path === '/agentrun/v1/self'), 'it asked the agent API for the phase');
    // The refused call, then the reserve's run: a turn of tool calls and the answer.
    assert.equal(gw.seen.modelRequests.length, 3);
    assert.match(JSON.stringify(gw.seen.modelRequests[1].input), /budget is spent/);
  } finally {
    await gw.close();
  }
});

// The gateway's CA comes from $AGENTRUN_GATEWAY_CA_FILE (gateway.mjs gives it to its undici
// dispatcher), not only from $NODE_EXTRA_CA_CERTS, which runAgent leaves unset unless told.
const hasOpenSSL = spawnSync('openssl', ['version']).status === 0;
test('trusts the gateway CA from $AGENTRUN_GATEWAY_CA_FILE (or $NODE_EXTRA_CA_CERTS), not by default', { skip: !hasOpenSSL && 'no openssl to make a certificate' }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentrun-tls-'));
  const mk = spawnSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=agentrun-gateway', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', join(dir, 'tls.key'), '-out', join(dir, 'ca.crt'),
  ], { encoding: 'utf8' });
  assert.equal(mk.status, 0, mk.stderr);
  const file = tokenFile();
  const gw = await startStubGateway({
    tokenFile: file,
    tls: { key: readFileSync(join(dir, 'tls.key'), 'utf8'), cert: readFileSync(join(dir, 'ca.crt'), 'utf8') },
  });
  try {
    const env = { AGENTRUN_GATEWAY_URL: gw.url, AGENTRUN_TOKEN_FILE: file, AGENTRUN_GOAL: 'goal' };
    const untrusted = await runAgent(env);
    assert.equal(untrusted.code, 1, `${untrusted.stdout}\n${untrusted.stderr}`);
    assert.equal(gw.seen.modelRequests.length, 0);
    const trusted = await runAgent({ ...env, AGENTRUN_GATEWAY_CA_FILE: join(dir, 'ca.crt') });
    assert.equal(trusted.code, 0, `${trusted.stdout}\n${trusted.stderr}`);
    assert.match(trusted.stdout, /FINAL ANSWER/);
    assert.equal(gw.seen.toolCalls.length, 3);
    // A pod has $NODE_EXTRA_CA_CERTS too; alone, it is enough.
    const extra = await runAgent({ ...env, NODE_EXTRA_CA_CERTS: join(dir, 'ca.crt') });
    assert.equal(extra.code, 0, `${extra.stdout}\n${extra.stderr}`);
  } finally {
    await gw.close();
  }
});
