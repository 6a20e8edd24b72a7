// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// The only agentrun-specific part of the examples. openaiClient() is the
// official `openai` client pointed at the gateway: baseURL is the model door
// ($OPENAI_BASE_URL) and the API key is the pod's projected token, re-read on
// every request (the kubelet rotates it); anthropicClient() is the official
// `@anthropic-ai/sdk` client on the Messages door. Node trusts the gateway's CA through
// $NODE_EXTRA_CA_CERTS, which the operator sets on every attempt container.
// AgentRun is a tiny client of the agent API (/agentrun/v1/self/...) for the
// facts the gateway cannot see: steps, finish, publication, settlement.
// @ts-check
import { readFile } from 'node:fs/promises';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

/** @returns {Promise<string>} the bearer token, read again on every call. */
export async function readToken() {
  return (await readFile(process.env.AGENTRUN_TOKEN_FILE ?? '', 'utf8')).trim();
}

/** @returns {OpenAI} */
export function openaiClient() {
  return new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: readToken });
}

/**
 * The official `@anthropic-ai/sdk` client on the gateway's Messages door
 * ($ANTHROPIC_BASE_URL: the SDK appends /v1/messages), the token as its
 * x-api-key. The SDK takes the key as a string: read once, which outlives a
 * run's minutes (the kubelet rotates the token after most of an hour).
 * @returns {Promise<Anthropic>}
 */
export async function anthropicClient() {
  return new Anthropic({ baseURL: process.env.ANTHROPIC_BASE_URL, apiKey: await readToken() });
}

/** An error answer of the agent API: {"error": {type, code, message, param}}. */
export class GatewayError extends Error {
  /** @param {number} status @param {any} body */
  constructor(status, body) {
    const e = body?.error ?? {};
    super(`gateway: ${e.code ?? 'http_' + status} (HTTP ${status}): ${e.message ?? ''}`);
    this.status = status;
    /** @type {string} */ this.code = e.code ?? `http_${status}`;
    /** @type {string} */ this.param = e.param ?? '';
    /** @type {string} */ this.type = e.type ?? '';
  }
}

export class AgentRun {
  constructor(base = process.env.AGENTRUN_GATEWAY_URL) {
    if (!base) throw new Error('no gateway: set $AGENTRUN_GATEWAY_URL');
    this.base = base.replace(/\/$/, '') + '/agentrun/v1';
  }

  /** @param {string} method @param {string} path @param {any} [body] */
  async call(method, path, body) {
    const headers = { authorization: `Bearer ${await readToken()}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const resp = await fetch(this.base + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await resp.text();
    const parsed = text ? JSON.parse(text) : null;
    if (!resp.ok) throw new GatewayError(resp.status, parsed);
    return parsed;
  }

  self() { return this.call('GET', '/self'); }
  /** @param {boolean} progress */
  step(progress) { return this.call('POST', '/self/steps', { progress }); }
  fault(scope, kind, message = '', escalate = false) {
    return this.call('POST', '/self/faults', { scope, kind, message, escalate });
  }
  finish() { return this.call('POST', '/self/finish', {}); }
  /** @param {string[]} sections */
  plan(sections) { return this.call('PUT', '/self/report/plan', { sections }); }
  settle() { return this.call('POST', '/self/settle', {}); }

  /**
   * Publish one planned section: the report.publish tool call (reported
   * again while it awaits an approval), the section, the outcome.
   * @param {string} section @param {string} content
   */
  async publish(section, content) {
    const args = { tool: 'report.publish', arguments: { section, content }, context: section, waitSeconds: 60 };
    for (;;) {
      try {
        const call = await this.call('POST', '/self/toolcalls', args);
        const report = await this.call('POST', '/self/report/sections', { callID: call.id, section, content });
        await this.call('POST', `/self/toolcalls/${call.id}/outcome`, {});
        return report;
      } catch (e) {
        if (!(e instanceof GatewayError && e.code === 'approval_pending')) throw e;
      }
    }
  }

  /**
   * Follow GET /self/watch (server-sent events) until pred(view) holds.
   * @param {(view: any) => boolean} pred @param {number} timeoutMs
   */
  async waitFor(pred, timeoutMs = 120_000) {
    const signal = AbortSignal.timeout(timeoutMs);
    for (;;) {
      const resp = await fetch(this.base + '/self/watch', {
        headers: { authorization: `Bearer ${await readToken()}`, accept: 'text/event-stream' }, signal,
      });
      if (!resp.ok) throw new GatewayError(resp.status, JSON.parse(await resp.text()));
      const decoder = new TextDecoder();
      let buf = '';
      // @ts-ignore: a web ReadableStream is async-iterable in Node 20
      for await (const chunk of resp.body) {
        buf += decoder.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
          if (!data) continue;
          const view = JSON.parse(data);
          if (pred(view)) {
            await resp.body?.cancel().catch(() => {});
            return view;
          }
          if (view.phase === 'Terminated' || view.superseded) throw new GatewayError(409, { error: { code: 'run_terminated', message: 'the attempt stopped' } });
        }
      }
    }
  }
}
