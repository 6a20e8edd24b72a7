#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""An agent on the official `openai` package that never stops researching:
it calls the model until the gateway refuses (HTTP 429, code
grant_exhausted, surfaced by the SDK as openai.RateLimitError without a
retry: x-should-retry is false). The operator then finalizes the run; the
agent, watching its attempt, writes from the output reserve until that is
used up too, publishes what it has and settles. The run ends BudgetExhausted
with a settlement."""

from __future__ import annotations

import os
import sys

import openai

import agentrun
from gateway import openai_client


def ask(client: openai.OpenAI, model: str, prompt: str) -> str:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], max_tokens=64)
    return r.choices[0].message.content or ""


def main() -> int:
    client = openai_client()
    run = agentrun.Client.from_env()
    me = run.attempt()
    model = os.environ.get("AGENTRUN_MODEL") or me.models[0]
    run.plan_report(["Findings", "Open questions"])

    notes: list[str] = []
    while True:
        try:
            notes.append(ask(client, model, f"Tell me more about: {me.goal} (round {len(notes) + 1})"))
            run.step(progress=False)
        except openai.RateLimitError as e:
            print(f"refused after {len(notes)} calls: HTTP {e.status_code} {e.code}: {e.message}", flush=True)
            # grant_exhausted, or reserve_exhausted when the operator
            # finalized first and the loop went on spending the reserve.
            if e.code not in ("grant_exhausted", "reserve_exhausted"):
                raise
            break

    view = run.wait_for(lambda v: v.finalizing or v.stopped, timeout=120)
    if view.stopped:
        print(f"the run ended ({view.phase}) without finalizing", flush=True)
        return 0
    print(f"finalizing: grant now {view.grant.model_requests} model requests, used {view.used.model_requests}", flush=True)

    summary = ""
    while True:  # the reserve is for output work: write the summary with it
        try:
            summary = summary or ask(client, model, "Summarise these notes: " + " ".join(notes)[-2000:])
            if summary:
                ask(client, model, "Anything to add?")
        except openai.RateLimitError as e:
            print(f"reserve used up: {e.code}: {e.message}", flush=True)
            break
    run.publish("Findings", summary or " ".join(notes) or "(nothing)")
    s = run.settle()
    print(f"settled {s.settlement} ({s.blocks_committed}/{s.blocks_planned}); used {run.attempt().used}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except agentrun.Stopped as e:
        print(f"stopped: {e.message}", flush=True)
        sys.exit(0)
