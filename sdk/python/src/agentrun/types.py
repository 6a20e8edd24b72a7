# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The agent API's wire types (pkg/gatewayapi/types.go), as dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, TypedDict

# Environment of every attempt container.
ENV_GATEWAY_URL = "AGENTRUN_GATEWAY_URL"
ENV_TOKEN_FILE = "AGENTRUN_TOKEN_FILE"
ENV_CA_FILE = "AGENTRUN_GATEWAY_CA_FILE"
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"

PATH_PREFIX = "/agentrun/v1"
MODEL_PATH_PREFIX = "/v1"
HEADER_SHOULD_RETRY = "x-should-retry"
TOOL_REPORT_PUBLISH = "report.publish"

# Stable error codes (error.code).
CODE_GRANT_EXHAUSTED = "grant_exhausted"
CODE_RESERVE_EXHAUSTED = "reserve_exhausted"
CODE_FINALIZE_ONLY = "finalize_only"
CODE_RUN_TERMINATED = "run_terminated"
CODE_ATTEMPT_SUPERSEDED = "attempt_superseded"
CODE_MODEL_NOT_FOUND = "model_not_found"
CODE_INVALID_REQUEST = "invalid_request"
CODE_INVALID_TOKEN = "invalid_token"
CODE_NOT_AN_ATTEMPT = "not_an_attempt"
CODE_PERMISSION_DENIED = "permission_denied"
CODE_APPROVAL_DENIED = "approval_denied"
CODE_APPROVAL_PENDING = "approval_pending"
CODE_UNKNOWN_TOOL = "unknown_tool"
CODE_NOT_FOUND = "not_found"
CODE_UPSTREAM_UNAVAILABLE = "upstream_unavailable"
CODE_NOT_PERSISTED = "not_persisted"
CODE_INTERCEPTOR_UNAVAILABLE = "interceptor_unavailable"

# Fault scopes.
SCOPE_TOOL = "Tool"
SCOPE_PROVIDER = "Provider"
SCOPE_REVIEWER = "Reviewer"
SCOPE_HOOK = "Hook"
SCOPE_AGENT = "Agent"


@dataclass(frozen=True)
class Grant:
    """The attempt's allowance, in absolute counters of its own usage."""

    model_requests: int = 0
    tool_calls: int = 0
    tokens: Optional[int] = None
    finalize_only: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Grant":
        return cls(
            model_requests=int(d.get("modelRequests", 0)),
            tool_calls=int(d.get("toolCalls", 0)),
            tokens=d.get("tokens"),
            finalize_only=bool(d.get("finalizeOnly", False)),
        )


@dataclass(frozen=True)
class Usage:
    """What the gateway counted."""

    model_requests: int = 0
    tool_calls: int = 0
    tokens: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Usage":
        return cls(
            model_requests=int(d.get("modelRequests", 0)),
            tool_calls=int(d.get("toolCalls", 0)),
            tokens=int(d.get("tokens", 0)),
        )


class Directive(TypedDict, total=False):
    type: str  # Degrade or Compress
    gate: str
    message: str


class Approval(TypedDict, total=False):
    actionID: str
    decision: str  # Approve or Deny
    comment: str
    approver: str


class Tool(TypedDict, total=False):
    name: str
    risk: str
    effect: str
    idempotent: bool
    description: str


@dataclass(frozen=True)
class Attempt:
    """The agent's view of its attempt (GET /self, every event of /self/watch)."""

    namespace: str
    run: str
    run_attempt: str
    attempt: int
    goal: str = ""
    phase: str = ""
    finalizing: bool = False
    superseded: bool = False
    mode: str = ""
    grant: Grant = field(default_factory=Grant)
    used: Usage = field(default_factory=Usage)
    directives: list[Directive] = field(default_factory=list)
    deadline: Optional[str] = None
    heartbeat_seconds: int = 0
    policy: str = ""
    tools: list[Tool] = field(default_factory=list)
    auto_approve: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    awaiting_approval: list[str] = field(default_factory=list)
    steps: int = 0
    last_progress_step: int = 0
    finish_proposed: bool = False
    publication: dict[str, Any] = field(default_factory=dict)
    checkpoint: str = ""
    revision: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stopped(self) -> bool:
        """The attempt must stop: the run is Terminated or the attempt superseded."""
        return self.phase == "Terminated" or self.superseded

    def has_directive(self, type_: str) -> bool:
        return any(d.get("type") == type_ for d in self.directives)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Attempt":
        return cls(
            namespace=d.get("namespace", ""),
            run=d.get("run", ""),
            run_attempt=d.get("runAttempt", ""),
            attempt=int(d.get("attempt", 0)),
            goal=d.get("goal", ""),
            phase=d.get("phase", ""),
            finalizing=bool(d.get("finalizing", False)),
            superseded=bool(d.get("superseded", False)),
            mode=d.get("mode", ""),
            grant=Grant.from_dict(d.get("grant") or {}),
            used=Usage.from_dict(d.get("used") or {}),
            directives=list(d.get("directives") or []),
            deadline=d.get("deadline"),
            heartbeat_seconds=int(d.get("heartbeatSeconds", 0)),
            policy=d.get("policy", ""),
            tools=list(d.get("tools") or []),
            auto_approve=list(d.get("autoApprove") or []),
            models=list(d.get("models") or []),
            approvals=list(d.get("approvals") or []),
            awaiting_approval=list(d.get("awaitingApproval") or []),
            steps=int(d.get("steps", 0)),
            last_progress_step=int(d.get("lastProgressStep", 0)),
            finish_proposed=bool(d.get("finishProposed", False)),
            publication=dict(d.get("publication") or {}),
            checkpoint=d.get("checkpoint", ""),
            revision=int(d.get("revision", 0)),
            raw=dict(d),
        )


@dataclass(frozen=True)
class ToolCall:
    """An admitted tool call: only this answer allows the call."""

    id: str
    tool: str
    fingerprint: str
    action_id: str
    effect: str
    risk: str
    idempotency_key: str = ""
    write_ahead: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ToolCall":
        return cls(
            id=d["id"],
            tool=d.get("tool", ""),
            fingerprint=d.get("fingerprint", ""),
            action_id=d.get("actionID", ""),
            effect=d.get("effect", ""),
            risk=d.get("risk", ""),
            idempotency_key=d.get("idempotencyKey", ""),
            write_ahead=bool(d.get("writeAhead", False)),
        )


@dataclass(frozen=True)
class ToolError:
    """A failed call's fault (kind is a PascalCase word, e.g. Timeout)."""

    kind: str
    message: str = ""
    retryable: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.message:
            d["message"] = self.message
        if self.retryable:
            d["retryable"] = True
        return d


@dataclass(frozen=True)
class ReportSection:
    name: str
    key: str
    published: bool


@dataclass(frozen=True)
class Report:
    """The run's report as the gateway persisted it."""

    location: str
    sections: list[ReportSection]
    committed: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Report":
        return cls(
            location=d.get("location", ""),
            sections=[
                ReportSection(s.get("name", ""), s.get("key", ""), bool(s.get("published", False)))
                for s in d.get("sections") or []
            ],
            committed=int(d.get("committed", 0)),
        )


@dataclass(frozen=True)
class Settlement:
    """The settlement the gateway persisted: Complete, Partial or None."""

    settlement: str
    blocks_planned: int
    blocks_committed: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Settlement":
        return cls(
            settlement=d.get("settlement", ""),
            blocks_planned=int(d.get("blocksPlanned", 0)),
            blocks_committed=int(d.get("blocksCommitted", 0)),
        )
