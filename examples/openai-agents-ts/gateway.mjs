// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// The only agentrun-specific part of the example: the two doors of
// agentrun-gateway, as @openai/agents wants them.
//
//  - openaiClient(): the official `openai` client whose baseURL is the model
//    door ($AGENTRUN_GATEWAY_URL/v1) and whose apiKey is the pod's projected
//    token, re-read for every request (the kubelet rotates it).
//  - gatewayMcpServer(): an MCPServerStreamableHttp on the tool door
//    ($AGENTRUN_GATEWAY_URL/mcp) whose fetch adds `Authorization: Bearer
//    <token>`, re-read for every request, with a tools/call timeout long
//    enough to wait out a human approval.
//  - gatewayFetch: the fetch both use. It trusts $AGENTRUN_GATEWAY_CA_FILE
//    (when set) and never gives up on a slow answer before the approval
//    timeout: Node's built-in fetch drops a response whose headers (or next
//    body bytes) take longer than 300 s.
// @ts-check
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import OpenAI from 'openai';
import { MCPServerStreamableHttp } from '@openai/agents';
import { Agent as Dispatcher, fetch as undiciFetch } from 'undici';

/** How long one tools/call may take: a High-risk call waits for a human (policy approvalTimeout, 15 min by default). */
export const toolCallTimeoutMs = 1000 * Number(process.env.AGENTRUN_MCP_TIMEOUT_SECONDS ?? 20 * 60);

/** @returns {string} the gateway's base URL, without a trailing slash. */
export function gatewayURL() {
  const base = process.env.AGENTRUN_GATEWAY_URL;
  if (!base) throw new Error('no gateway: set $AGENTRUN_GATEWAY_URL');
  return base.replace(/\/+$/, '');
}

/** @returns {Promise<string>} the bearer token, read again on every call. */
export async function readToken() {
  const file = process.env.AGENTRUN_TOKEN_FILE;
  if (!file) throw new Error('no token: set $AGENTRUN_TOKEN_FILE');
  return (await readFile(file, 'utf8')).trim();
}

const caFile = process.env.AGENTRUN_GATEWAY_CA_FILE;
const dispatcher = new Dispatcher({
  // 0 = no limit; the MCP client's own request timeout (toolCallTimeoutMs) bounds a call.
  headersTimeout: 0,
  bodyTimeout: 0,
  connect: caFile ? { ca: readFileSync(caFile, 'utf8') } : {},
});

/**
 * fetch(input, init) through the gateway's dispatcher.
 * @param {any} input @param {any} [init]
 */
export function gatewayFetch(input, init) {
  return undiciFetch(input, { ...init, dispatcher });
}

/**
 * gatewayFetch with `Authorization: Bearer <token>` set from the token file.
 * @param {any} input @param {any} [init]
 */
export async function authorizedFetch(input, init = {}) {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${await readToken()}`);
  return gatewayFetch(input, { ...init, headers });
}

/** @returns {OpenAI} the model door. x-should-retry: false on every refusal, so maxRetries stays default. */
export function openaiClient() {
  return new OpenAI({ baseURL: `${gatewayURL()}/v1`, apiKey: readToken, fetch: gatewayFetch });
}

/** @returns {MCPServerStreamableHttp} the tool door; connect() it before the run, close() it after. */
export function gatewayMcpServer() {
  return new MCPServerStreamableHttp({
    name: 'agentrun-gateway',
    url: `${gatewayURL()}/mcp`,
    fetch: authorizedFetch,
    // tools/call: the MCP SDK's default is 60 s; an approval may take up to the policy's approvalTimeout.
    timeout: toolCallTimeoutMs,
    // initialize and tools/list (default 5 s): a pod's first request to the gateway may wait
    // up to 15 s while the operator records the pod's UID.
    clientSessionTimeoutSeconds: 60,
  });
}

/**
 * The run's goal: $AGENTRUN_GOAL, else the attempt's goal from the agent API (GET /agentrun/v1/self).
 * @returns {Promise<string>}
 */
export async function runGoal() {
  if (process.env.AGENTRUN_GOAL) return process.env.AGENTRUN_GOAL;
  const resp = await authorizedFetch(`${gatewayURL()}/agentrun/v1/self`);
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(`GET /agentrun/v1/self: HTTP ${resp.status}: ${JSON.stringify(body)}`);
  return body.goal;
}

/**
 * The attempt's view (GET /agentrun/v1/self), polled until the run is
 * Finalizing: the operator gives the output reserve once the working grant is
 * used up. Throws when the run ended instead, or after timeoutMs.
 * @param {number} [timeoutMs] @returns {Promise<any>}
 */
export async function waitForFinalizing(timeoutMs = 120_000) {
  for (const until = Date.now() + timeoutMs; Date.now() < until;) {
    const resp = await authorizedFetch(`${gatewayURL()}/agentrun/v1/self`);
    const view = await resp.json().catch(() => null);
    if (!resp.ok) throw new Error(`GET /agentrun/v1/self: HTTP ${resp.status}: ${JSON.stringify(view)}`);
    if (view.finalizing) return view;
    if (view.phase === 'Terminated') throw new Error('the run ended without finalizing');
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the run did not finalize within ${timeoutMs / 1000} s`);
}

/**
 * POST path (under /agentrun/v1/self) with an empty JSON body; the answer's JSON.
 * @param {string} path @returns {Promise<any>}
 */
async function selfPost(path) {
  const resp = await authorizedFetch(`${gatewayURL()}/agentrun/v1/self${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}',
  });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(`POST /agentrun/v1/self${path}: HTTP ${resp.status}: ${JSON.stringify(body)}`);
  return body;
}

/**
 * An explicit end of the run (agent.mjs calls it only with AGENTRUN_SETTLE=1):
 * propose finish (POST /agentrun/v1/self/finish), then settle the
 * publication from what report.publish wrote (POST /agentrun/v1/self/settle).
 * Not needed: the operator takes the pod's exit 0 as the finish and settles
 * from what the gateway published, after waiting (at most --fact-grace) for
 * the gateway's last facts; with both calls made the facts are final at once.
 * @returns {Promise<{settlement: string, blocksPlanned: number, blocksCommitted: number}>}
 */
export async function finishRun() {
  await selfPost('/finish');
  return selfPost('/settle');
}
