# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The gateway's error answers as exceptions carrying status, code and param."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import types as t


class GatewayError(Exception):
    """An error answer of the gateway: {"error": {"type", "code", "message", "param"}}."""

    def __init__(self, status: int, code: str, message: str, param: str = "", type_: str = "",
                 headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(f"gateway: {code} (HTTP {status}): {message}")
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type = type_
        self.headers = dict(headers or {})

    @property
    def should_retry(self) -> bool:
        """False when the gateway says repeating the request is refused again."""
        return self.headers.get(t.HEADER_SHOULD_RETRY, "").lower() != "false"


class InvalidRequest(GatewayError):
    """400: the body is malformed or a field (param) breaks a rule."""


class Unauthenticated(GatewayError):
    """401 invalid_token / 403 not_an_attempt."""


class GrantExhausted(GatewayError):
    """429 grant_exhausted or reserve_exhausted."""


class FinalizeOnly(GatewayError):
    """429 finalize_only: the run is finalizing and the call is not output work."""


class Stopped(GatewayError):
    """409 run_terminated or attempt_superseded: stop."""


class ApprovalPending(GatewayError):
    """409 approval_pending: the wait for an approval ended first; report again."""


class PermissionDenied(GatewayError):
    """403 permission_denied / approval_denied."""


class NotFound(GatewayError):
    """404 unknown_tool / model_not_found / not_found."""


class NotPersisted(GatewayError):
    """503 not_persisted: a fact that must be durable was not written; try again."""


class InterceptorUnavailable(GatewayError):
    """503 interceptor_unavailable: a fail-closed interceptor could not check the call for now
    (its authority unreachable); nothing was dispatched or counted; try again."""


_BY_CODE: dict[str, type[GatewayError]] = {
    t.CODE_INVALID_REQUEST: InvalidRequest,
    t.CODE_INVALID_TOKEN: Unauthenticated,
    t.CODE_NOT_AN_ATTEMPT: Unauthenticated,
    t.CODE_GRANT_EXHAUSTED: GrantExhausted,
    t.CODE_RESERVE_EXHAUSTED: GrantExhausted,
    t.CODE_FINALIZE_ONLY: FinalizeOnly,
    t.CODE_RUN_TERMINATED: Stopped,
    t.CODE_ATTEMPT_SUPERSEDED: Stopped,
    t.CODE_APPROVAL_PENDING: ApprovalPending,
    t.CODE_PERMISSION_DENIED: PermissionDenied,
    t.CODE_APPROVAL_DENIED: PermissionDenied,
    t.CODE_UNKNOWN_TOOL: NotFound,
    t.CODE_MODEL_NOT_FOUND: NotFound,
    t.CODE_NOT_FOUND: NotFound,
    t.CODE_NOT_PERSISTED: NotPersisted,
    t.CODE_INTERCEPTOR_UNAVAILABLE: InterceptorUnavailable,
}


def from_body(status: int, body: Any, headers: Optional[Mapping[str, str]] = None) -> GatewayError:
    """The exception for an error answer (an OpenAI-shaped body, or anything else)."""
    err: Mapping[str, Any] = {}
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        err = body["error"]
    code = str(err.get("code") or f"http_{status}")
    cls = _BY_CODE.get(code, GatewayError)
    message = str(err.get("message") or (body if isinstance(body, str) else ""))
    return cls(status, code, message, str(err.get("param") or ""), str(err.get("type") or ""), headers)
