# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The conformance scenarios (test/conformance/conformance_test.go) through the Python SDK."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import agentrun
from agentrun import Client, ToolError
from agentrun.conformance import Server

HERE = os.path.dirname(os.path.abspath(__file__))


def eventually(cond, timeout: float = 5.0):
    """Poll cond until it returns something true (the gateway coalesces facts)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.02)


def chat(c: Client, model: str) -> dict:
    return c.chat(model, [{"role": "user", "content": "Say hello."}])


def test_scenarios(server: Server, client: Client) -> None:
    m = server.manifest
    # read self
    a = client.attempt()
    assert (a.run, a.run_attempt, a.phase, a.mode) == ("survey", "survey-1", "Running", "Auto")
    assert a.grant.model_requests == m["grant"]["modelRequests"]
    assert m["model"] in a.models and m["model"] in client.models()
    # step
    assert client.step(progress=True) == 1
    assert client.step() == 2
    # a fault with a bad field: 400 naming param
    with pytest.raises(agentrun.InvalidRequest) as e:
        client.fault("Nowhere", "Timeout")
    assert (e.value.status, e.value.code, e.value.param) == (400, "invalid_request", "scope")
    client.fault("Tool", "Timeout", "a slow tool", retryable=True)
    # a model call, counted
    out = chat(client, m["model"])
    assert out["choices"][0]["message"]["content"]
    a = client.attempt()
    assert a.used.model_requests == 1 and a.used.tokens > 0
    # beyond the grant: 429 grant_exhausted with x-should-retry: false
    for _ in range(m["grant"]["modelRequests"] - 1):
        chat(client, m["model"])
    with pytest.raises(agentrun.GrantExhausted) as e:
        chat(client, m["model"])
    assert (e.value.status, e.value.code, e.value.type) == (429, "grant_exhausted", "rate_limit_error")
    assert not e.value.should_retry and "4/4 model requests" in e.value.message
    # finish, publish from the reserve, settle
    a = client.wait_for(lambda v: v.finalizing, timeout=10)
    assert a.grant.finalize_only
    assert client.finish().finish_proposed
    rep = client.plan_report(["Summary", "Details"])
    assert [s.name for s in rep.sections] == ["Summary", "Details"] and rep.committed == 0
    rep = client.publish("Summary", "It works.")
    assert rep.committed == 1 and rep.sections[0].published
    s = client.settle()
    assert (s.settlement, s.blocks_planned, s.blocks_committed) == ("Partial", 2, 1)
    st = server.status()["status"]
    assert st["publication"]["settled"] and st["publication"]["settlement"] == "Partial" and st["finishProposed"]
    # the harness ends the run once it settled: the watch ends on Terminated
    last = None
    for v in client.watch(read_timeout=10):
        last = v
    assert last is not None and last.stopped and last.phase == "Terminated"
    with pytest.raises(agentrun.Stopped) as e:
        chat(client, m["model"])
    assert e.value.code == "run_terminated" and e.value.status == 409


def test_other_calls(server: Server, client: Client) -> None:
    client.heartbeat()
    client.advice("reviewer", "Continue")
    with pytest.raises(agentrun.InvalidRequest) as e:
        client.advice("reviewer", "not pascal")
    assert e.value.param == "kind"
    client.checkpoint("page-3")
    assert client.attempt().checkpoint == "page-3"
    with pytest.raises(agentrun.NotFound) as e:
        client.report_tool_call("rm.rf")
    assert e.value.code == "unknown_tool"
    # a side-effecting tool: write-ahead, then the outcome
    call = client.report_tool_call("notes.write", {"section": "A", "text": "x"})
    assert call.write_ahead and call.idempotency_key and call.effect == "Write"
    assert [f["id"] for f in server.status()["status"].get("inFlight", [])] == [call.id]
    client.tool_outcome(call.id, ToolError(kind="Timeout", message="slow", retryable=True))
    assert eventually(lambda: not server.status()["status"].get("inFlight"))
    with pytest.raises(agentrun.NotFound):
        client.tool_outcome(call.id)
    assert client.call_tool("http.get", {"url": "https://example.com"}, lambda c: "page") == "page"
    client.escalate("Agent", "Confused", "cannot go on")
    faults = server.status()["status"].get("faults", [])  # escalations are durable before the answer
    assert any(f.get("kind") == "Confused" for f in faults), faults


def test_token_file_reread(server: Server, client: Client, tmp_path) -> None:
    tok = tmp_path / "token"
    tok.write_text("wrong")
    c = Client(server.manifest["url"], token_file=str(tok), ca_file=server.manifest["caFile"])
    with pytest.raises(agentrun.Unauthenticated) as e:
        c.attempt()
    assert e.value.status == 401 and e.value.code == "invalid_token"
    tok.write_text(server.manifest["token"] + "\n")  # rotated: read again on the next request
    assert c.attempt().run == "survey"


def test_approval_pending_loop() -> None:
    with Server(["--publish-risk", "High"]) as server:
        client = Client.from_env(server.env)
        client.plan_report(["Summary"])
        with pytest.raises(agentrun.ApprovalPending) as e:
            client.report_tool_call("report.publish", {"section": "Summary", "content": "x"}, wait_seconds=1, max_wait=0)
        assert e.value.status == 409

        done = threading.Event()

        def approve() -> None:  # as a user would: approve what the attempt awaits
            approved: set[str] = set()
            while not done.wait(0.05):
                for request in server.status()["status"].get("awaitingApproval") or []:
                    action = request["actionID"]
                    if action not in approved:
                        server.command(approve=action)
                        approved.add(action)

        th = threading.Thread(target=approve)
        th.start()
        try:
            rep = client.publish("Summary", "Approved content.", wait_seconds=1, max_wait=30)
        finally:
            done.set()
            th.join()
        assert rep.committed == 1
        assert client.settle().settlement == "Complete"


def test_minimal_agent(server: Server) -> None:
    env = {**os.environ, **server.env}
    out = subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "minimal_agent.py")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    st = server.status()["status"]
    assert st["publication"]["settlement"] == "Complete" and st["finishProposed"]
    assert st["usage"]["modelRequests"] == 1
