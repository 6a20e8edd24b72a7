# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""A small client of the agentrun gateway's agent API (stdlib only).

Every attempt pod gets AGENTRUN_GATEWAY_URL, AGENTRUN_TOKEN_FILE (a projected
service-account token, re-read on every request: the kubelet rotates it) and
AGENTRUN_GATEWAY_CA_FILE; Client.from_env() reads them.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from . import errors
from . import types as t
from .types import Attempt, Report, Settlement, ToolCall, ToolError


class Client:
    """The agent API of one attempt, as its pod calls it."""

    def __init__(
        self,
        gateway_url: str,
        *,
        token_file: Optional[str] = None,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        timeout: float = 60.0,
        traceparent: Optional[str] = None,
    ) -> None:
        if not gateway_url:
            raise ValueError(f"no gateway: set ${t.ENV_GATEWAY_URL}")
        if not token_file and not token:
            raise ValueError(f"no token: set ${t.ENV_TOKEN_FILE}")
        self.gateway_url = gateway_url.rstrip("/")
        self.token_file = token_file
        self._token = token
        self.timeout = timeout
        # The run's W3C trace context ($TRACEPARENT): the gateway's spans of
        # this attempt join the run's trace.
        self.traceparent = traceparent
        self._ssl = ssl.create_default_context()
        if ca_file:
            self._ssl.load_verify_locations(cafile=ca_file)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **kw: Any) -> "Client":
        env = os.environ if environ is None else environ
        return cls(
            env.get(t.ENV_GATEWAY_URL, ""),
            token_file=env.get(t.ENV_TOKEN_FILE) or None,
            ca_file=env.get(t.ENV_CA_FILE) or None,
            traceparent=env.get("TRACEPARENT") or None,
            **kw,
        )

    # ---- transport ----

    def token(self) -> str:
        """The bearer token: the token file's current content, else the fixed one."""
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as f:
                return f.read().strip()
        return self._token or ""

    def _request(self, method: str, path: str, body: Any = None, *, timeout: Optional[float] = None,
                 accept: str = "application/json") -> urllib.request.Request:
        data = None
        headers = {"Authorization": "Bearer " + self.token(), "Accept": accept}
        if self.traceparent:
            headers["traceparent"] = self.traceparent
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(self.gateway_url + path, data=data, method=method, headers=headers)

    def call(self, method: str, path: str, body: Any = None, *, timeout: Optional[float] = None) -> Any:
        """One request; the decoded JSON answer (None for 204); raises GatewayError."""
        req = self._request(method, path, body)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                raw = resp.read()
                if resp.status == 204 or not raw:
                    return None
                return json.loads(raw)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace").strip()
            raise errors.from_body(e.code, parsed, {k.lower(): v for k, v in e.headers.items()}) from None

    def _api(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.call(method, t.PATH_PREFIX + path, body, **kw)

    # ---- the attempt ----

    def attempt(self) -> Attempt:
        """GET /self: the grant, what was used, phase, mode, directives, approvals."""
        return Attempt.from_dict(self._api("GET", "/self"))

    def watch(self, *, read_timeout: float = 60.0) -> Iterator[Attempt]:
        """GET /self/watch (server-sent events): the view now, then every change.

        Ends when the attempt stops (Terminated or superseded) or the stream ends.
        """
        req = self._request("GET", t.PATH_PREFIX + "/self/watch", accept="text/event-stream")
        try:
            resp = urllib.request.urlopen(req, timeout=read_timeout, context=self._ssl)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            raise errors.from_body(e.code, parsed, {k.lower(): v for k, v in e.headers.items()}) from None
        with resp:
            data: list[str] = []
            for line in resp:
                s = line.decode("utf-8").rstrip("\r\n")
                if s.startswith("data:"):
                    data.append(s[5:].lstrip())
                elif s == "" and data:
                    view = Attempt.from_dict(json.loads("\n".join(data)))
                    data = []
                    yield view
                    if view.stopped:
                        return

    def wait_for(self, cond: Callable[[Attempt], bool], timeout: float = 60.0) -> Attempt:
        """Follow the watch until cond(view) holds; TimeoutError after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the attempt did not reach the awaited state")
            try:
                for view in self.watch(read_timeout=min(left, 60.0)):
                    if cond(view):
                        return view
                    if view.stopped or time.monotonic() > deadline:
                        break
            except (TimeoutError, OSError):
                pass
            view = self.attempt()
            if cond(view):
                return view
            if view.stopped:
                raise errors.Stopped(409, t.CODE_RUN_TERMINATED, f"the attempt stopped in phase {view.phase}")

    def heartbeat(self) -> None:
        """POST /self/heartbeat: the agent is alive (model calls and reports count too)."""
        self._api("POST", "/self/heartbeat")

    def step(self, progress: bool = False) -> int:
        """POST /self/steps: one step of the agent loop; returns its number."""
        return int(self._api("POST", "/self/steps", {"progress": progress})["step"])

    def fault(self, scope: str, kind: str, message: str = "", *, retryable: bool = False,
              escalate: bool = False) -> None:
        """POST /self/faults: a local fault; an escalated one fails the attempt."""
        body: dict[str, Any] = {"scope": scope, "kind": kind}
        if message:
            body["message"] = message
        if retryable:
            body["retryable"] = True
        if escalate:
            body["escalate"] = True
        self._api("POST", "/self/faults", body)

    def escalate(self, scope: str, kind: str, message: str = "", *, retryable: bool = False) -> None:
        """A fault the agent cannot handle: the operator treats the attempt as failed.

        retryable says a new attempt may fix it (the operator recovers the run);
        without it the run is not recovered but finalized or ended AgentFailed.
        """
        self.fault(scope, kind, message, retryable=retryable, escalate=True)

    def advice(self, source: str, kind: str) -> None:
        """POST /self/advice: advice never blocks, delays or extends a run."""
        self._api("POST", "/self/advice", {"source": source, "kind": kind})

    def checkpoint(self, checkpoint: str) -> None:
        """PUT /self/checkpoint: the resume token a replacement attempt gets."""
        self._api("PUT", "/self/checkpoint", {"checkpoint": checkpoint})

    def finish(self) -> Attempt:
        """POST /self/finish: propose to finish (durable before the answer)."""
        return Attempt.from_dict(self._api("POST", "/self/finish", {}))

    # ---- tool calls ----

    def report_tool_call(self, tool: str, arguments: Optional[Mapping[str, Any]] = None, *,
                         context: str = "", wait_seconds: int = 60,
                         max_wait: Optional[float] = None) -> ToolCall:
        """POST /self/toolcalls before dispatching a call; only an answer allows it.

        While the call awaits an approval the gateway answers approval_pending
        after wait_seconds; the call is reported again until it is decided, the
        run stops, or max_wait seconds passed (then ApprovalPending is raised).
        """
        body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments or {})}
        if context:
            body["context"] = context
        if wait_seconds:
            body["waitSeconds"] = int(wait_seconds)
        start = time.monotonic()
        while True:
            try:
                return ToolCall.from_dict(self._api("POST", "/self/toolcalls", body,
                                                    timeout=self.timeout + wait_seconds))
            except errors.ApprovalPending:
                if max_wait is not None and time.monotonic() - start >= max_wait:
                    raise

    def tool_outcome(self, call_id: str, error: Optional[ToolError] = None) -> None:
        """POST /self/toolcalls/{id}/outcome after the call ran (no error: it succeeded)."""
        body: dict[str, Any] = {}
        if error is not None:
            body["error"] = error.to_dict()
        self._api("POST", f"/self/toolcalls/{call_id}/outcome", body)

    def call_tool(self, tool: str, arguments: Optional[Mapping[str, Any]], run: Callable[[ToolCall], Any], *,
                  context: str = "", **kw: Any) -> Any:
        """Report, run and report the outcome of one of the agent's own tools."""
        call = self.report_tool_call(tool, arguments, context=context, **kw)
        try:
            result = run(call)
        except Exception as e:  # the outcome must be reported whatever happened
            self.tool_outcome(call.id, ToolError(kind=type(e).__name__ or "Failed", message=str(e)[:512]))
            raise
        self.tool_outcome(call.id)
        return result

    # ---- the report ----

    def report(self) -> Report:
        """GET /self/report: the report as the gateway persisted it."""
        return Report.from_dict(self._api("GET", "/self/report"))

    def plan_report(self, sections: Sequence[str]) -> Report:
        """PUT /self/report/plan; a plan an earlier attempt persisted is kept."""
        return Report.from_dict(self._api("PUT", "/self/report/plan", {"sections": list(sections)}))

    def publish_section(self, call_id: str, section: str, content: str) -> Report:
        """POST /self/report/sections: the effect of an admitted report.publish call."""
        return Report.from_dict(self._api("POST", "/self/report/sections",
                                          {"callID": call_id, "section": section, "content": content}))

    def publish(self, section: str, content: str, **kw: Any) -> Report:
        """Publish one planned section: the report.publish call (waiting for an
        approval if the policy asks for one), the section, the outcome."""
        return self.call_tool(t.TOOL_REPORT_PUBLISH, {"section": section, "content": content},
                              lambda call: self.publish_section(call.id, section, content),
                              context=section, **kw)

    def settle(self) -> Settlement:
        """POST /self/settle: the gateway settles from what the report holds."""
        return Settlement.from_dict(self._api("POST", "/self/settle", {}))

    # ---- the model door (for stdlib-only agents; any OpenAI SDK works too) ----

    def models(self) -> list[str]:
        """GET /v1/models: the model names the run's policy serves."""
        return [m["id"] for m in self.call("GET", t.MODEL_PATH_PREFIX + "/models")["data"]]

    def chat(self, model: str, messages: Sequence[Mapping[str, Any]], **fields: Any) -> dict[str, Any]:
        """POST /v1/chat/completions (not streaming); the provider's answer."""
        body = {"model": model, "messages": list(messages), **fields}
        return self.call("POST", t.MODEL_PATH_PREFIX + "/chat/completions", body)
