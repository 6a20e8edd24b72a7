#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""A minimal agent on the official `anthropic` package, through the
gateway's Messages door ($ANTHROPIC_BASE_URL), in one of two modes:

  claude.py complete    two model calls (the second streamed), then it
                        proposes to finish, publishes its one planned
                        section and settles: Completed / Complete.
  claude.py overspend   calls the model until the gateway refuses (HTTP 429
                        rate_limit_error, error.code grant_exhausted; the SDK
                        raises anthropic.RateLimitError without a retry:
                        x-should-retry is false), waits for Finalizing, writes
                        from the reserve until that is used up, publishes and
                        settles: BudgetExhausted with a settlement.

It publishes through the agentrun Python SDK, as complete.py does."""

from __future__ import annotations

import os
import sys

import anthropic

import agentrun
from gateway import anthropic_client


def ask(client: anthropic.Anthropic, model: str, prompt: str, max_tokens: int = 64) -> str:
    m = client.messages.create(model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}])
    return "".join(b.text for b in m.content if b.type == "text")


def refusal(e: anthropic.APIStatusError) -> str:
    """The gateway's code, kept in the Anthropic error body's error.code."""
    body = e.body if isinstance(e.body, dict) else {}
    return str((body.get("error") or {}).get("code", ""))


def complete(client: anthropic.Anthropic, run: agentrun.Client, me, model: str) -> None:
    run.plan_report(["Answer"])
    first = client.messages.create(
        model=model, max_tokens=128, system="You are a concise research assistant.",
        messages=[{"role": "user", "content": f"Outline an answer to: {me.goal}"}],
    )
    outline = "".join(b.text for b in first.content if b.type == "text")
    run.step(progress=True)
    with client.messages.stream(
        model=model, max_tokens=256,
        messages=[{"role": "user", "content": f"Write the answer from this outline: {outline}"}],
    ) as stream:
        answer = "".join(stream.text_stream)
    run.step(progress=True)
    run.finish()
    run.publish("Answer", answer or outline)


def overspend(client: anthropic.Anthropic, run: agentrun.Client, me, model: str) -> None:
    run.plan_report(["Findings", "Open questions"])
    notes: list[str] = []
    while True:
        try:
            notes.append(ask(client, model, f"Tell me more about: {me.goal} (round {len(notes) + 1})"))
            run.step(progress=False)
        except anthropic.RateLimitError as e:
            print(f"refused after {len(notes)} calls: HTTP {e.status_code} {refusal(e)}: {e.message}", flush=True)
            if refusal(e) not in ("grant_exhausted", "reserve_exhausted"):
                raise
            break
    view = run.wait_for(lambda v: v.finalizing or v.stopped, timeout=120)
    if view.stopped:
        print(f"the run ended ({view.phase}) without finalizing", flush=True)
        return
    print(f"finalizing: grant now {view.grant.model_requests} model requests, used {view.used.model_requests}", flush=True)
    summary = ""
    while True:  # the reserve is for output work: write the summary with it
        try:
            summary = summary or ask(client, model, "Summarise these notes: " + " ".join(notes)[-2000:])
            if summary:
                ask(client, model, "Anything to add?")
        except anthropic.RateLimitError as e:
            print(f"reserve used up: {refusal(e)}: {e.message}", flush=True)
            break
    run.publish("Findings", summary or " ".join(notes) or "(nothing)")


def main(mode: str) -> int:
    client = anthropic_client()
    run = agentrun.Client.from_env()
    me = run.attempt()
    model = os.environ.get("AGENTRUN_MODEL") or me.models[0]
    print(f"run {me.run}: goal {me.goal!r}, model {model}, mode {mode}, Messages door", flush=True)
    {"complete": complete, "overspend": overspend}[mode](client, run, me, model)
    s = run.settle()
    print(f"settled {s.settlement} ({s.blocks_committed}/{s.blocks_planned}); used {run.attempt().used}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "complete"))
    except agentrun.Stopped as e:
        print(f"stopped: {e.message}", flush=True)
        sys.exit(0)
