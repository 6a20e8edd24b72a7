# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The examples against the conformance gateway (test/conformance), which
plays the operator: Finalizing with the reserve once the grant is used up,
Terminated once the publication settled."""

from __future__ import annotations

import os
import subprocess
import time
import sys

from agentrun.conformance import Server

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(server: Server, name: str) -> str:
    env = {**os.environ, **server.env}
    out = subprocess.run([sys.executable, os.path.join(HERE, name)], env=env, cwd=HERE,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_complete() -> None:
    with Server() as server:
        out = run_example(server, "complete.py")
        st = server.status()["status"]
        assert st["finishProposed"] and st["publication"]["settlement"] == "Complete", out
        assert st["usage"]["modelRequests"] == 2 and st["usage"]["tokens"] > 0, st["usage"]


def test_overspend() -> None:
    with Server() as server:
        m = server.manifest
        out = run_example(server, "overspend.py")
        assert "grant_exhausted" in out and "reserve_exhausted" in out, out
        # The agent exits once it settled; the run ends after that.
        for _ in range(250):
            st = server.status()
            if st["spec"]["runPhase"] == "Terminated":
                break
            time.sleep(0.02)
        assert st["spec"]["runPhase"] == "Terminated" and st["spec"]["grant"]["finalizeOnly"]
        status = st["status"]
        assert status["publication"]["settlement"] == "Partial" and not status.get("finishProposed"), out
        # Nothing served beyond the grant: the working grant plus the reserve, exactly.
        assert status["usage"]["modelRequests"] == m["grant"]["modelRequests"] + m["reserve"]["modelRequests"], out
