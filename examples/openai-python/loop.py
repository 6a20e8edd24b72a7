#!/usr/bin/env python3
# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""An agent on the official `openai` package alone — no agentrun SDK, so it
reports no steps and claims no progress — that never stops on its own:

  loop.py repeat   asks the model the same question round after round (an
                   agent stuck in a loop: the answers repeat);
  loop.py vary     asks a new question every round (an agent that keeps
                   talking: every answer is new);

  loop.py MODE SECONDS  pauses that long between rounds (a real model's
                   turn takes seconds; the scripted one answers at once, and
                   the gates are decided once the gateway's facts reach the
                   operator).

Only the gateway sees what it does, and the gates bind it all the same: the
first is finalized NoProgress, the second StepLimit. It stops when the model
door refuses it for good (the run finalized and its reserve is used up, or it
ended): HTTP 409/429 with x-should-retry: false, which the SDK does not
retry."""

from __future__ import annotations

import os
import sys
import time

import openai

from gateway import openai_client

FINAL = {"grant_exhausted", "reserve_exhausted", "finalize_only", "run_terminated", "deadline_reached"}


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "repeat"
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    client = openai_client()
    model = os.environ.get("AGENTRUN_MODEL") or client.models.list().data[0].id
    n = 0
    while True:
        n += 1
        question = "What next?" if mode == "repeat" else f"Round {n}: what next?"
        try:
            r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                               max_tokens=32)
        except openai.APIStatusError as e:
            print(f"refused at round {n}: HTTP {e.status_code} {e.code}: {e.message}", flush=True)
            if e.code in FINAL:
                return 0
            raise
        print(f"round {n}: {r.choices[0].message.content}", flush=True)
        time.sleep(pause)


if __name__ == "__main__":
    sys.exit(main())
