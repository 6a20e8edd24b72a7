// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// An agent on the official `openai` package that never stops researching: it
// calls the model until the gateway refuses (HTTP 429, code grant_exhausted,
// surfaced as OpenAI.RateLimitError and not retried: x-should-retry is false).
// The operator then finalizes the run; the agent, watching its attempt, writes
// from the output reserve until that is used up too, publishes what it has and
// settles. The run ends BudgetExhausted with a settlement.
// @ts-check
import OpenAI from 'openai';
import { AgentRun, GatewayError, openaiClient } from './gateway.mjs';

const client = openaiClient();
const run = new AgentRun();
const me = await run.self();
const model = process.env.AGENTRUN_MODEL ?? me.models[0];
await run.plan(['Findings', 'Open questions']);

/** @param {string} prompt */
async function ask(prompt) {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 64 });
  return r.choices[0]?.message?.content ?? '';
}

try {
  const notes = [];
  for (;;) {
    try {
      notes.push(await ask(`Tell me more about: ${me.goal} (round ${notes.length + 1})`));
      await run.step(false);
    } catch (e) {
      if (!(e instanceof OpenAI.RateLimitError)) throw e;
      console.log(`refused after ${notes.length} calls: HTTP ${e.status} ${e.code}: ${e.message}`);
      // grant_exhausted, or reserve_exhausted when the operator finalized
      // first and the loop went on spending the reserve.
      if (e.code !== 'grant_exhausted' && e.code !== 'reserve_exhausted') throw e;
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
      if (!(e instanceof OpenAI.RateLimitError)) throw e;
      console.log(`reserve used up: ${e.code}: ${e.message}`);
      break;
    }
  }
  await run.publish('Findings', summary || notes.join(' ') || '(nothing)');
  const s = await run.settle();
  console.log(`settled ${s.settlement} (${s.blocksCommitted}/${s.blocksPlanned}); used ${JSON.stringify((await run.self()).used)}`);
} catch (e) {
  if (e instanceof GatewayError && (e.code === 'run_terminated' || e.code === 'attempt_superseded')) {
    console.log(`stopped: ${e.message}`);
  } else {
    throw e;
  }
}
