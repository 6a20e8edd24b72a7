# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""agentrun: a small, typed, stdlib-only client of the agentrun gateway's agent API."""

from .client import Client
from .errors import (
    ApprovalPending,
    FinalizeOnly,
    GatewayError,
    GrantExhausted,
    InterceptorUnavailable,
    InvalidRequest,
    NotFound,
    NotPersisted,
    PermissionDenied,
    Stopped,
    Unauthenticated,
)
from .types import Attempt, Grant, Report, ReportSection, Settlement, ToolCall, ToolError, Usage

__all__ = [
    "Client", "Attempt", "Grant", "Usage", "Report", "ReportSection", "Settlement", "ToolCall", "ToolError",
    "GatewayError", "InvalidRequest", "Unauthenticated", "GrantExhausted", "FinalizeOnly", "Stopped",
    "ApprovalPending", "PermissionDenied", "NotFound", "NotPersisted",
    "InterceptorUnavailable",
]
