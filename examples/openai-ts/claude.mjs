// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// A minimal agent on the official `@anthropic-ai/sdk` package, through the
// gateway's Messages door ($ANTHROPIC_BASE_URL), in one of two modes:
//
//   node claude.mjs complete    two model calls (the second streamed), then it
//                               proposes to finish, publishes its one planned
//                               section and settles: Completed / Complete.
//   node claude.mjs overspend   calls the model until the gateway refuses (HTTP
//                               429 rate_limit_error, error.code grant_exhausted;
//                               Anthropic.RateLimitError, not retried:
//                               x-should-retry is false), waits for Finalizing,
//                               writes from the reserve until that is used up,
//                               publishes and settles: BudgetExhausted.
//
// It publishes through the agent API (gateway.mjs), as complete.mjs does.
// @ts-check
import Anthropic from '@anthropic-ai/sdk';
import { AgentRun, GatewayError, anthropicClient } from './gateway.mjs';

const mode = process.argv[2] ?? 'complete';
const client = await anthropicClient();
const run = new AgentRun();
const me = await run.self();
const model = process.env.AGENTRUN_MODEL ?? me.models[0];
console.log(`run ${me.run}: goal ${JSON.stringify(me.goal)}, model ${model}, mode ${mode}, Messages door`);

/** @param {Anthropic.Message} m */
const text = (m) => m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
/** @param {string} prompt */
const ask = async (prompt) =>
  text(await client.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: prompt }] }));
/** The gateway's code, kept in the Anthropic error body's error.code. @param {any} e */
const refusal = (e) => e?.error?.error?.code ?? '';

async function complete() {
  await run.plan(['Answer']);
  const outline = text(await client.messages.create({
    model, max_tokens: 128, system: 'You are a concise research assistant.',
    messages: [{ role: 'user', content: `Outline an answer to: ${me.goal}` }],
  }));
  await run.step(true);
  const stream = client.messages.stream({
    model, max_tokens: 256, messages: [{ role: 'user', content: `Write the answer from this outline: ${outline}` }],
  });
  const answer = text(await stream.finalMessage());
  await run.step(true);
  await run.finish();
  await run.publish('Answer', answer || outline);
}

async function overspend() {
  await run.plan(['Findings', 'Open questions']);
  const notes = [];
  for (;;) {
    try {
      notes.push(await ask(`Tell me more about: ${me.goal} (round ${notes.length + 1})`));
      await run.step(false);
    } catch (e) {
      if (!(e instanceof Anthropic.RateLimitError)) throw e;
      console.log(`refused after ${notes.length} calls: HTTP ${e.status} ${refusal(e)}: ${e.message}`);
      if (refusal(e) !== 'grant_exhausted' && refusal(e) !== 'reserve_exhausted') throw e;
      break;
    }
  }
  const view = await run.waitFor((v) => v.finalizing);
  console.log(`finalizing: grant now ${view.grant.modelRequests} model requests, used ${view.used.modelRequests ?? 0}`);
  let summary = '';
  for (;;) {
    // The reserve is for output work: write the summary with it.
    try {
      if (!summary) summary = await ask('Summarise these notes: ' + notes.join(' ').slice(-2000));
      else await ask('Anything to add?');
    } catch (e) {
      if (!(e instanceof Anthropic.RateLimitError)) throw e;
      console.log(`reserve used up: ${refusal(e)}: ${e.message}`);
      break;
    }
  }
  await run.publish('Findings', summary || notes.join(' ') || '(nothing)');
}

try {
  await (mode === 'overspend' ? overspend() : complete());
  const s = await run.settle();
  console.log(`settled ${s.settlement} (${s.blocksCommitted}/${s.blocksPlanned}); used ${JSON.stringify((await run.self()).used)}`);
} catch (e) {
  if (e instanceof GatewayError && (e.code === 'run_terminated' || e.code === 'attempt_superseded')) {
    console.log(`stopped: ${e.message}`);
  } else {
    throw e;
  }
}
