// Copyright 2026. Licensed under the Apache License, Version 2.0.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runScript, startServer } from './server.mjs';

test('conformance scenarios through the openai package and the agent API', async () => {
  const server = await startServer();
  try {
    const out = runScript({ manifest: { ...server.manifest, env: {
      ...server.manifest.env, CONFORMANCE_GRANT: String(server.manifest.grant.modelRequests), CONFORMANCE_TOKEN: server.manifest.token,
    } } }, 'test/scenarios.mjs');
    assert.equal(out.match(/^ok /gm)?.length, 6, out);
    const { status } = await server.status();
    assert.equal(status.publication.settlement, 'Partial');
    assert.equal(status.finishProposed, true);
  } finally {
    await server.close();
  }
});
