#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""An agent on the OpenAI Agents SDK for Python (`openai-agents`), in its
default mode: its model is the Responses API, on the gateway's Responses door
($OPENAI_BASE_URL/responses); its tools are the gateway's MCP door
($AGENTRUN_MCP_URL). Nothing switches it to Chat Completions.

It runs the run's goal to a final answer, prints it and exits 0: the operator
takes that exit as the finish and settles the run from what report.publish
published. A model call refused 429 grant_exhausted (the working grant is
used up) makes it wait for the run to be Finalizing, then run once more from
the output reserve, asked to publish what it found. Any other refused model
call ends it: it prints the gateway's error and exits 2, but for a 429
reserve_exhausted (Finalizing, the reserve spent): what it published stands,
and it exits 0. The same behaviour as examples/openai-agents-ts/agent.mjs."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import httpx2
import openai
from agents import Agent, MaxTurnsExceeded, Runner, set_default_openai_client, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp

import agentrun
from gateway import gateway_tls, read_token


async def token() -> str:
    return read_token()


def mcp_client(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
               auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """The MCP door's HTTP client: the gateway's CA, and the pod's token read
    again for every request (the kubelet rotates it)."""

    async def bearer(request: httpx2.Request) -> None:
        request.headers["Authorization"] = f"Bearer {read_token()}"

    return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, verify=gateway_tls(),
                             event_hooks={"request": [bearer]})


async def main() -> int:
    set_tracing_disabled(True)  # no internet: nothing to export traces to
    set_default_openai_client(openai.AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=token,
        http_client=openai.DefaultAsyncHttpxClient(verify=gateway_tls())))
    run = agentrun.Client.from_env()
    goal = os.environ.get("AGENTRUN_GOAL") or run.attempt().goal
    model = os.environ.get("AGENTRUN_MODEL", "scripted")
    max_turns = int(os.environ.get("AGENTRUN_MAX_TURNS", "20"))
    async with MCPServerStreamableHttp(
        name="agentrun-gateway",
        params={"url": os.environ.get("AGENTRUN_MCP_URL") or os.environ["AGENTRUN_GATEWAY_URL"].rstrip("/") + "/mcp", "timeout": 60, "sse_read_timeout": 20 * 60,
                "httpx_client_factory": mcp_client},
        client_session_timeout_seconds=60,
    ) as tools:
        print(f"agent: tools {json.dumps([t.name for t in await tools.list_tools()], separators=(',', ':'))}", flush=True)
        agent = Agent(
            name="agentrun research agent",
            instructions="You are a careful research agent. Use the tools you are given to research the goal, "
                         "and publish your findings. If a tool reports an error, read why and carry on without it. "
                         "End with a short final answer.",
            model=model,  # the default provider: the Responses API
            mcp_servers=[tools],
        )
        print(f"agent: goal {goal!r}, model {model}, max {max_turns} turns", flush=True)
        try:
            result = await Runner.run(agent, goal, max_turns=max_turns)
        except openai.RateLimitError as e:
            if e.code != "grant_exhausted":
                raise
            print(f"agent: the working grant is used up ({e.message}); waiting for Finalizing", flush=True)
            view = await asyncio.to_thread(run.wait_for, lambda v: v.finalizing or v.stopped, 120)
            if view.stopped:
                raise
            print(f"agent: finalizing, grant now {view.grant.model_requests} model requests: "
                  "publishing from the reserve", flush=True)
            result = await Runner.run(agent, "Your research budget is spent. Publish what you found about this "
                                             f"goal with report.publish, then answer in one sentence. The goal: {goal}",
                                      max_turns=max_turns)
        print(result.final_output, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except openai.RateLimitError as e:
        if e.code != "reserve_exhausted":
            print(f"agent: the gateway refused a model call: HTTP {e.status_code} {e.code}: {e.message}", file=sys.stderr)
            sys.exit(2)
        # Finalizing, and the output reserve is spent: what it published stands.
        print(f"agent: the output reserve is used up ({e.message}); what is published stands", flush=True)
        sys.exit(0)
    except openai.APIStatusError as e:
        print(f"agent: the gateway refused a model call: HTTP {e.status_code} {e.code}: {e.message}", file=sys.stderr)
        sys.exit(2)
    except MaxTurnsExceeded as e:
        print(f"agent: no final answer: {e}", file=sys.stderr)
        sys.exit(3)
