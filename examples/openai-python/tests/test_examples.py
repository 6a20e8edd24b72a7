# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The examples against the conformance gateway (test/conformance), which
plays the operator: Finalizing with the reserve once the grant is used up,
Terminated once the publication settled."""

from __future__ import annotations

import os
import subprocess
import time
import sys

import pytest

from agentrun.conformance import Server

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(server: Server, name: str, *args: str) -> str:
    env = {**os.environ, **server.env}
    out = subprocess.run([sys.executable, os.path.join(HERE, name), *args], env=env, cwd=HERE,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


# Each scenario, on the chat door (openai) and on the Messages door (anthropic).
COMPLETE = pytest.mark.parametrize("agent", [["complete.py"], ["claude.py", "complete"]], ids=["chat", "messages"])
OVERSPEND = pytest.mark.parametrize("agent", [["overspend.py"], ["claude.py", "overspend"]], ids=["chat", "messages"])


@COMPLETE
def test_complete(agent: list[str]) -> None:
    with Server() as server:
        out = run_example(server, *agent)
        st = server.status()["status"]
        assert st["finishProposed"] and st["publication"]["settlement"] == "Complete", out
        assert st["usage"]["modelRequests"] == 2 and st["usage"]["tokens"] > 0, st["usage"]


@OVERSPEND
def test_overspend(agent: list[str]) -> None:
    with Server() as server:
        m = server.manifest
        out = run_example(server, *agent)
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


def test_agents_sdk_on_the_responses_door() -> None:
    """openai-agents in its default mode: the Responses door for its model,
    the MCP door for its tools, exit 0 without the agent API."""
    with Server() as server:
        out = run_example(server, "agents_sdk.py")
        assert "agent: tools [" in out and "report.publish" in out, out
        assert "fake upstream" in out, out  # the model door's answer
        for _ in range(100):  # the gateway writes its counts coalesced
            st = server.status()["status"]
            if st.get("usage", {}).get("modelRequests"):
                break
            time.sleep(0.05)
        assert st["usage"]["modelRequests"] == 1 and not st.get("finishProposed"), st
