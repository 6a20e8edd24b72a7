// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// An agent on the official `openai` package that completes its run within
// budget: two model calls (one streamed), then it proposes to finish,
// publishes its one planned section and settles.
// @ts-check
import { AgentRun, openaiClient } from './gateway.mjs';

const client = openaiClient();
const run = new AgentRun();
const me = await run.self();
const model = process.env.AGENTRUN_MODEL ?? (await client.models.list()).data[0].id;
console.log(`run ${me.run}: goal ${JSON.stringify(me.goal)}, model ${model}, grant ${me.grant.modelRequests} model requests`);
await run.plan(['Answer']);

const first = await client.chat.completions.create({
  model,
  messages: [
    { role: 'system', content: 'You are a concise research assistant.' },
    { role: 'user', content: `Outline an answer to: ${me.goal}` },
  ],
  max_tokens: 128,
});
const outline = first.choices[0]?.message?.content ?? '';
await run.step(true);

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: `Write the answer from this outline: ${outline}` }],
  max_tokens: 256,
  stream: true,
});
let answer = '';
for await (const chunk of stream) answer += chunk.choices[0]?.delta?.content ?? '';
await run.step(true);

await run.finish();
await run.publish('Answer', answer || outline);
const s = await run.settle();
console.log(`settled ${s.settlement} (${s.blocksCommitted}/${s.blocksPlanned}); used ${JSON.stringify((await run.self()).used)}`);
