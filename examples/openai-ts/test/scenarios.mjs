// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// The conformance scenarios (test/conformance/conformance_test.go), run as an
// attempt pod would (a child node with the pod's environment, so
// NODE_EXTRA_CA_CERTS is the gateway's CA): read self, step, a fault with a
// bad field, a counted model call, the refusal beyond the grant, finish and
// settle. Prints "ok <scenario>" lines; exits non-zero on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { AgentRun, GatewayError, openaiClient } from '../gateway.mjs';

const client = openaiClient();
const run = new AgentRun();
const grant = Number(process.env.CONFORMANCE_GRANT);
const ok = (s) => console.log(`ok ${s}`);
const chat = () => client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Say hello.' }] });

let v = await run.self();
assert.equal(v.run, 'survey');
assert.equal(v.phase, 'Running');
assert.equal(v.grant.modelRequests, grant);
assert.ok((await client.models.list()).data.some((m) => m.id === 'scripted'));
ok('read self');

assert.equal((await run.step(true)).step, 1);
ok('step');

await assert.rejects(run.fault('Nowhere', 'Timeout'), (e) => e instanceof GatewayError && e.status === 400 && e.code === 'invalid_request' && e.param === 'scope');
await run.fault('Tool', 'Timeout', 'a slow tool');
ok('fault with a bad field names param');

const r = await chat();
assert.ok(r.choices[0].message.content);
v = await run.self();
assert.equal(v.used.modelRequests, 1);
assert.ok(v.used.tokens > 0);
ok('model call counted');

for (let i = 1; i < grant; i++) await chat();
// One refused request, seen through the SDK: its status, code and type, and
// the header that keeps the SDK from retrying it.
await assert.rejects(chat(), (e) => {
  assert.ok(e instanceof OpenAI.RateLimitError, String(e));
  assert.equal(e.status, 429);
  assert.equal(e.code, 'grant_exhausted');
  assert.equal(e.type, 'rate_limit_error');
  const retry = typeof e.headers?.get === 'function' ? e.headers.get('x-should-retry') : e.headers?.['x-should-retry'];
  assert.equal(retry, 'false');
  return true;
});
ok('beyond the grant: 429 grant_exhausted, x-should-retry false');

v = await run.waitFor((x) => x.finalizing, 10_000);
assert.equal(v.grant.finalizeOnly, true);
assert.equal((await run.finish()).finishProposed, true);
await run.plan(['Summary', 'Details']);
const rep = await run.publish('Summary', 'It works.');
assert.equal(rep.committed, 1);
const s = await run.settle();
assert.deepEqual(s, { settlement: 'Partial', blocksPlanned: 2, blocksCommitted: 1 });
ok('finish, publish from the reserve, settle');
