// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// The examples against the conformance gateway, which plays the operator:
// Finalizing with the reserve once the grant is used up, Terminated once the
// publication settled.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runScript, startServer } from './server.mjs';

// terminated waits for the harness (the operator) to end the run: an agent
// exits once it settled, and the run ends after that.
async function terminated(server) {
  for (let i = 0; i < 250; i++) {
    const st = await server.status();
    if (st.spec.runPhase === 'Terminated') return st;
    await new Promise((r) => setTimeout(r, 20));
  }
  return server.status();
}

// Each scenario, on the chat door (openai) and on the Messages door (@anthropic-ai/sdk).
const doors = [
  { door: 'chat', complete: ['complete.mjs'], overspend: ['overspend.mjs'] },
  { door: 'messages', complete: ['claude.mjs', 'complete'], overspend: ['claude.mjs', 'overspend'] },
];

for (const d of doors) {
  test(`${d.complete.join(' ')} completes within budget (${d.door} door)`, async () => {
    const server = await startServer();
    try {
      const out = runScript(server, ...d.complete);
      const { status } = await server.status();
      assert.equal(status.publication.settlement, 'Complete', out);
      assert.equal(status.finishProposed, true);
      assert.equal(status.usage.modelRequests, 2);
    } finally {
      await server.close();
    }
  });

  test(`${d.overspend.join(' ')} is refused at the grant and finalizes from the reserve (${d.door} door)`, async () => {
    const server = await startServer();
    try {
      const m = server.manifest;
      const out = runScript(server, ...d.overspend);
      assert.match(out, /grant_exhausted/);
      assert.match(out, /reserve_exhausted/);
      const { spec, status } = await terminated(server);
      assert.equal(spec.runPhase, 'Terminated');
      assert.equal(status.publication.settlement, 'Partial', out);
      assert.ok(!status.finishProposed);
      // Nothing served beyond the grant: the working grant plus the reserve, exactly.
      assert.equal(status.usage.modelRequests, m.grant.modelRequests + m.reserve.modelRequests, out);
    } finally {
      await server.close();
    }
  });
}
