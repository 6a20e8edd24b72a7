#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""An agent on the official `openai` package that completes its run within
budget: two model calls (one streamed), then it proposes to finish,
publishes its one planned section and settles (agentrun Python SDK)."""

from __future__ import annotations

import os
import sys

import agentrun
from gateway import openai_client


def main() -> int:
    client = openai_client()
    run = agentrun.Client.from_env()
    me = run.attempt()
    model = os.environ.get("AGENTRUN_MODEL") or client.models.list().data[0].id
    print(f"run {me.run}: goal {me.goal!r}, model {model}, grant {me.grant.model_requests} model requests", flush=True)
    run.plan_report(["Answer"])

    first = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "You are a concise research assistant."},
                  {"role": "user", "content": f"Outline an answer to: {me.goal}"}],
        max_tokens=128,
    )
    outline = first.choices[0].message.content or ""
    run.step(progress=True)

    parts = []
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": f"Write the answer from this outline: {outline}"}],
        max_tokens=256,
        stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    answer = "".join(parts)
    run.step(progress=True)

    run.finish()
    run.publish("Answer", answer or outline)
    s = run.settle()
    print(f"settled {s.settlement} ({s.blocks_committed}/{s.blocks_planned}); used {run.attempt().used}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
