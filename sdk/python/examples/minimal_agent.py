#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""A minimal agent on the agentrun Python SDK: read the attempt, plan the
report, ask the model once, report the step, propose to finish, publish the
section, settle. Run it in an attempt pod (the operator sets the env)."""

from __future__ import annotations

import sys

import agentrun


def main() -> int:
    c = agentrun.Client.from_env()
    me = c.attempt()
    print(f"run {me.namespace}/{me.run} attempt {me.attempt}: {me.goal!r}; grant {me.grant}", flush=True)
    if me.stopped:
        return 0
    model = me.models[0] if me.models else "scripted"
    c.plan_report(["Summary"])
    answer = c.chat(model, [
        {"role": "system", "content": "You are a careful research assistant."},
        {"role": "user", "content": me.goal or "Say hello."},
    ], max_tokens=256)
    text = answer["choices"][0]["message"].get("content") or "(no answer)"
    c.step(progress=True)
    c.finish()
    c.publish("Summary", text)
    s = c.settle()
    print(f"settled {s.settlement}: {s.blocks_committed}/{s.blocks_planned} sections", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except agentrun.Stopped as e:
        print(f"stopped: {e.message}", flush=True)
        sys.exit(0)
