// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// An agent on @openai/agents (npm), unmodified but for where it meets the
// gateway (gateway.mjs): its model is the SDK's default, the Responses API,
// on the gateway's Responses door (/v1/responses); its tools are the
// gateway's MCP door. Nothing switches it to Chat Completions. It runs the run's goal to a final
// answer, prints it and exits 0: the operator takes that exit as the finish
// and settles the run from what the gateway's report.publish published. It
// calls nothing of the agent API but, without $AGENTRUN_GOAL, GET /self for
// the goal.
//
// A refused tool call (permission denied in this mode, approval denied or
// expired, grant exhausted, an Unknown outcome, invalid arguments) comes back
// as an MCP result with isError: true; @openai/agents hands its text to the
// model as the tool's output and the run goes on. A model call refused 429
// grant_exhausted (the working grant is used up) makes it wait for the run to
// be Finalizing (GET /self), then run once more from the output reserve, asked
// to publish what it found, and exit 0; a 429 reserve_exhausted (Finalizing,
// the reserve spent) ends it with exit 0 too: what it published stands. Any
// other refused model call (finalize_only, 409 run_terminated, ...) ends the
// run: the agent prints the gateway's error and exits 2.
// @ts-check
import OpenAI from 'openai';
import {
  Agent, MaxTurnsExceededError, run, setDefaultOpenAIClient, setTracingDisabled,
} from '@openai/agents';
import { finishRun, gatewayMcpServer, openaiClient, runGoal, waitForFinalizing } from './gateway.mjs';

// No internet: nothing to export traces to.
setTracingDisabled(true);
const client = openaiClient();
setDefaultOpenAIClient(client);

const modelName = process.env.AGENTRUN_MODEL || 'scripted';
const maxTurns = Number(process.env.AGENTRUN_MAX_TURNS || 20);
// AGENTRUN_SETTLE=1 (opt-in): propose finish and settle through the agent API
// before exiting, so the settlement is the gateway's own and the operator has no
// last facts to wait for; by default the exit 0 says it all.
const settle = process.env.AGENTRUN_SETTLE === '1';

/** @param {string} line @param {number} code @returns {never} */
function die(line, code) {
  console.error(line);
  process.exit(code);
}

const goal = await runGoal().catch((e) => die(`agent: cannot read the goal: ${e.message}`, 1));
const tools = gatewayMcpServer();
await tools.connect().catch((e) => die(`agent: cannot reach the gateway's MCP door: ${e.message}`, 1));
// What the door serves in this mode (ReadOnly and Plan list no writes), as MCP names them.
const listed = await tools.listTools().catch((e) => die(`agent: cannot list the MCP door's tools: ${e.message}`, 1));
console.log(`agent: tools ${JSON.stringify(listed.map((t) => t.name))}`);

const agent = new Agent({
  name: 'agentrun research agent',
  instructions:
    'You are a careful research agent. Use the tools you are given to research the goal, keep notes, ' +
    'and publish your findings. If a tool reports an error, read why and carry on without it. ' +
    'End with a short final answer.',
  model: modelName, // the default provider: the Responses API on `client`
  mcpServers: [tools],
});

let code = 0;
try {
  console.log(`agent: goal ${JSON.stringify(goal)}, model ${modelName}, max ${maxTurns} turns`);
  const result = await run(agent, goal, { maxTurns }).catch(async (e) => {
    if (!(e instanceof OpenAI.APIError && e.code === 'grant_exhausted')) throw e;
    console.log(`agent: the working grant is used up (${e.message}); waiting for Finalizing`);
    // A run that ends instead of finalizing: the refusal stands (exit 2).
    const view = await waitForFinalizing().catch(() => { throw e; });
    console.log(`agent: finalizing, grant now ${view.grant?.modelRequests} model requests: publishing from the reserve`);
    return run(agent, `Your research budget is spent. Publish what you found about this goal with ` +
      `report.publish, then answer in one sentence. The goal: ${goal}`, { maxTurns });
  });
  console.log(result.finalOutput ?? '');
  if (settle) {
    const s = await finishRun();
    console.log(`agent: settled ${s.settlement} (${s.blocksCommitted}/${s.blocksPlanned} sections)`);
  }
} catch (e) {
  if (e instanceof OpenAI.APIError && e.code === 'reserve_exhausted') {
    // Finalizing, and the output reserve is spent: what it published stands.
    console.log(`agent: the output reserve is used up (${e.message}); what is published stands`);
  } else if (e instanceof OpenAI.APIError) {
    // The gateway's refusal, OpenAI-shaped: {"error": {"type", "code", "message", "param"}}.
    console.error(`agent: the gateway refused a model call: HTTP ${e.status} ${e.code ?? ''}: ${e.message}`);
    code = 2;
  } else if (e instanceof MaxTurnsExceededError) {
    console.error(`agent: no final answer within ${maxTurns} turns`);
    code = 3;
  } else {
    console.error(`agent: ${e instanceof Error ? e.stack : e}`);
    code = 1;
  }
} finally {
  await tools.close().catch(() => {});
}
process.exit(code);
