/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package gatewayapi

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The values of HeaderPurpose.
const (
	PurposeResearch = "research"
	PurposeOutput   = "output"
)

// Where the gateway is and how an attempt pod proves who it is.
const (
	// Audience is the audience of the projected service-account token an
	// attempt pod presents to the gateway. A token with this audience is
	// refused by the API server itself, so it is useless anywhere else.
	Audience = "agentrun-gateway"

	// EnvGatewayURL is the gateway's base URL (https://host:port), set on
	// every attempt container by the operator.
	EnvGatewayURL = "AGENTRUN_GATEWAY_URL"
	// EnvTokenFile is the path of the projected token (re-read on every
	// request: the kubelet rotates it).
	EnvTokenFile = "AGENTRUN_TOKEN_FILE"
	// EnvCAFile is the PEM bundle that signs the gateway's serving
	// certificate.
	EnvCAFile = "AGENTRUN_GATEWAY_CA_FILE"
	// EnvOpenAIBaseURL is the model door's base URL (<gateway>/v1), in the
	// variable the official OpenAI SDKs read.
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
	// EnvAnthropicBaseURL is the Messages door's base URL (<gateway>: the
	// Anthropic SDKs and Claude Code append /v1/messages), in the variable
	// they read.
	EnvAnthropicBaseURL = "ANTHROPIC_BASE_URL"

	// PathPrefix is the agent API's prefix; the version is part of the path.
	PathPrefix = "/agentrun/v1"
	// ModelPathPrefix is the OpenAI-compatible model door's prefix.
	ModelPathPrefix = "/v1"
	// MCPPath is the tool door: an MCP server (streamable HTTP, stateless)
	// in front of the policy's tool servers and the gateway's built-in tools.
	MCPPath = "/mcp"
	// EnvMCPURL is the tool door's URL (<gateway>/mcp), set on every attempt
	// container.
	EnvMCPURL = "AGENTRUN_MCP_URL"

	// MetaContext is the _meta key of a tools/call under which an agent may
	// add its own context to the call's fingerprint (e.g. the report section
	// it works on); the gateway adds the conversation it forwarded last.
	MetaContext = "agentrun.dev/context"
	// MetaCallID is the _meta key of a tools/call result naming the call's id.
	MetaCallID = "agentrun.dev/call-id"
	// MetaCode is the _meta key of a refused tools/call's result: the stable
	// error code (the codes below) saying why.
	MetaCode = "agentrun.dev/code"
	// MetaActionID is the _meta key naming the call's action id (what an
	// approval names).
	MetaActionID = "agentrun.dev/action-id"
	// MetaIdempotencyKey is the _meta key under which the gateway passes an
	// idempotent call's key to the tool server (also sent as the HTTP header
	// Idempotency-Key).
	MetaIdempotencyKey = "agentrun.dev/idempotency-key"
	// HeaderIdempotencyKey carries an idempotent call's key to the tool server.
	HeaderIdempotencyKey = "Idempotency-Key"
	// MetaDeadline is the _meta key under which the gateway passes a tool
	// server the time a call must be over by (RFC 3339, UTC, milliseconds):
	// the run's deadline, or the call's own timeout if sooner.
	MetaDeadline = "agentrun.dev/deadline"
	// HeaderDeadline carries the same time in the HTTP request.
	HeaderDeadline = "Agentrun-Deadline"
	// HeaderPurpose, on a model request, declares what it is for:
	// PurposeResearch or PurposeOutput. While the run is Finalizing the
	// reserve serves only output work, so a research request is refused
	// with finalize_only (as a research tool call is) instead of spending
	// the reserve. A request without it is served as output.
	HeaderPurpose = "Agentrun-Purpose"

	// HeaderShouldRetry is set to "false" on every refusal, so the official
	// OpenAI SDKs do not retry a request the grant will refuse again.
	HeaderShouldRetry = "x-should-retry"
)

// Error codes of the gateway, in error.code of every error body. They are
// stable: clients switch on them.
const (
	// CodeGrantExhausted: the attempt's working grant is used up (HTTP 429).
	// The operator decides next: Finalizing from the reserve, or Terminated.
	CodeGrantExhausted = "grant_exhausted"
	// CodeReserveExhausted: the run is Finalizing and its reserve is used up (HTTP 429).
	CodeReserveExhausted = "reserve_exhausted"
	// CodeFinalizeOnly: the run is Finalizing and the call is not output work (HTTP 429).
	CodeFinalizeOnly = "finalize_only"
	// CodeDeadlineReached: the run's deadline (in Finalizing, its hard
	// deadline) leaves less than the gateway's minimum call time, so the
	// call is not started (HTTP 429). The operator finalizes or ends the run.
	CodeDeadlineReached = "deadline_reached"
	// CodeRunTerminated: the run is Terminated; nothing more is served (HTTP 409).
	CodeRunTerminated = "run_terminated"
	// CodeAttemptSuperseded: a newer attempt replaced this one (HTTP 409).
	CodeAttemptSuperseded = "attempt_superseded"
	// CodeModelNotFound: the policy serves no model of that name (HTTP 404).
	CodeModelNotFound = "model_not_found"
	// CodeInvalidRequest: the body is malformed or a field breaks a rule (HTTP 400).
	CodeInvalidRequest = "invalid_request"
	// CodeInvalidToken: no token, or one the API server does not accept for
	// the gateway's audience (HTTP 401).
	CodeInvalidToken = "invalid_token"
	// CodeNotAnAttempt: a valid token, but not one bound to the pod of a
	// RunAttempt (HTTP 403).
	CodeNotAnAttempt = "not_an_attempt"
	// CodePermissionDenied: the permission matrix (mode × risk) denies the tool (HTTP 403).
	CodePermissionDenied = "permission_denied"
	// CodeApprovalDenied: the call needed confirmation and was denied (HTTP 403).
	CodeApprovalDenied = "approval_denied"
	// CodeApprovalPending: the call awaits approval and the wait ended first;
	// report the call again to keep waiting (HTTP 409).
	CodeApprovalPending = "approval_pending"
	// CodeWrongNode: the pod runs on another node than this gateway
	// instance serves (HTTP 421); its requests belong to its node's gateway.
	CodeWrongNode = "wrong_node"
	// CodeProviderKeyUnavailable: the gateway could not read the model's
	// provider key (HTTP 500).
	CodeProviderKeyUnavailable = "provider_key_unavailable"
	// CodeUnknownTool: the tool is not in the policy's catalogue (HTTP 404).
	CodeUnknownTool = "unknown_tool"
	// CodeApprovalExpired: nobody decided within the policy's
	// approvalTimeout; the call is refused (a tool error, the run goes on).
	CodeApprovalExpired = "approval_expired"
	// CodeOutcomeUnknown: an identical non-idempotent call was dispatched
	// and its outcome is unknown (a timeout, a lost connection, a gateway
	// restart): it is never dispatched again.
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeInvalidArguments: the arguments do not match the tool's input
	// schema; nothing was dispatched.
	CodeInvalidArguments = "invalid_arguments"
	// CodeToolServerUnavailable: the tool server could not be reached; the
	// call was not dispatched.
	CodeToolServerUnavailable = "tool_server_unavailable"
	// CodeInterceptorRefused: an interceptor of the policy's chain refused
	// the call (one vetoed it, or a fail-closed one failed after the call
	// ran and its result is withheld).
	CodeInterceptorRefused = "interceptor_refused"
	// CodeInterceptorUnavailable: a fail-closed interceptor failed before
	// the call (its authority unreachable: TokenReview with the API server
	// away), so nothing was dispatched; ask again (HTTP 503).
	CodeInterceptorUnavailable = "interceptor_unavailable"
	// CodeSecurityDegraded: a write refused because a Security interceptor
	// of the policy fails and its onSecurityDegraded posture is DenyWrites;
	// the message names the interceptor and its error rate. Retry later.
	CodeSecurityDegraded = "security_degraded"
	// CodeUseToolDoor: the tool is served by the gateway's MCP door and
	// cannot be admitted through the agent API.
	CodeUseToolDoor = "use_tool_door"
	// CodeToolDegraded: the attempt carries a Degrade directive and the
	// policy marks the tool degradable (HTTP 403; a tool error on the tool
	// door). Not retryable while the directive stands.
	CodeToolDegraded = "tool_degraded"
	// CodeNotFound: no such resource (an unknown tool call id, path) (HTTP 404).
	CodeNotFound = "not_found"
	// CodeUpstreamUnavailable: the provider could not be reached or timed out (HTTP 502/504).
	CodeUpstreamUnavailable = "upstream_unavailable"
	// CodeUpstreamResponseTooLarge: the provider's non-streaming answer (or
	// one line of its stream) exceeded the gateway's bound
	// (--max-model-response-bytes); the request was dispatched and is
	// charged its reservation (HTTP 502).
	CodeUpstreamResponseTooLarge = "upstream_response_too_large"
	// CodeToolResultTooLarge: the tool server's answer exceeded the
	// gateway's bound (--max-tool-result-bytes). The call was dispatched:
	// a side effect's outcome is recorded Unknown, as for a lost answer.
	CodeToolResultTooLarge = "tool_result_too_large"
	// CodeTooManyConcurrent: the attempt already has as many model requests
	// and tool calls under way as the gateway serves one attempt at once
	// (--max-attempt-concurrency); nothing was dispatched, ask again after
	// Retry-After (HTTP 429).
	CodeTooManyConcurrent = "too_many_concurrent_requests"
	// CodeNotPersisted: a fact that must be durable before the answer could
	// not be written to the API server; nothing was dispatched (HTTP 503).
	CodeNotPersisted = "not_persisted"
)

// Error types (error.type), as the OpenAI API spells them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeConflict       = "conflict_error"
	TypeServer         = "server_error"
)

// ErrorBody is every error the gateway answers, shaped like the OpenAI API's
// so the official SDKs surface it (status, code, message).
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is the error of an ErrorBody.
type Error struct {
	// Type is the error class (TypeRateLimit, ...).
	Type string `json:"type"`
	// Code is one of the Code* constants.
	Code string `json:"code"`
	// Message is one readable sentence, with numbers where there are any.
	Message string `json:"message"`
	// Param names the request field at fault, when one is.
	Param string `json:"param,omitempty"`
}

// Attempt is the agent's view of its attempt (GET /agentrun/v1/self and
// every event of /agentrun/v1/self/watch): what it may do and what the
// gateway has recorded of it.
type Attempt struct {
	// Namespace, Run, RunAttempt and Attempt identify the attempt.
	Namespace  string `json:"namespace"`
	Run        string `json:"run"`
	RunAttempt string `json:"runAttempt"`
	Attempt    int32  `json:"attempt"`
	// Goal is the run's research task.
	Goal string `json:"goal,omitempty"`
	// Phase is the run's phase (Running, Recovering, Finalizing, Terminated).
	Phase v1alpha1.Phase `json:"phase,omitempty"`
	// Finalizing: only output work, from the reserve.
	Finalizing bool `json:"finalizing,omitempty"`
	// Superseded: a newer attempt replaced this one; stop.
	Superseded bool `json:"superseded,omitempty"`
	// Mode is the session's current permission mode.
	Mode v1alpha1.PermissionMode `json:"mode,omitempty"`
	// HarnessDisallowedTools are the policy's harness tools the CLI must
	// not use (spec.harness.disallowedTools of the RuntimePolicy).
	HarnessDisallowedTools []string `json:"harnessDisallowedTools,omitempty"`
	// Grant is the attempt's allowance (absolute counters of its own usage).
	Grant v1alpha1.Grant `json:"grant"`
	// Used is what the gateway counted: dispatched model requests (failed
	// ones too), tokens the provider reported, tool calls admitted.
	Used v1alpha1.Usage `json:"used"`
	// Directives the agent loop should obey (Degrade, Compress).
	Directives []v1alpha1.Directive `json:"directives,omitempty"`
	// Deadline is when the run's deadline passes.
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// HeartbeatSeconds is how often the agent must show it is alive.
	HeartbeatSeconds int64 `json:"heartbeatSeconds,omitempty"`
	// Policy is the RuntimePolicy's name.
	Policy string `json:"policy,omitempty"`
	// Tools is the policy's tool catalogue.
	Tools []v1alpha1.Tool `json:"tools,omitempty"`
	// Chain is the resolved interceptor chain, in the order to apply it.
	Chain []v1alpha1.ResolvedInterceptor `json:"chain,omitempty"`
	// AutoApprove lists tools that run without confirmation in Auto mode.
	AutoApprove []string `json:"autoApprove,omitempty"`
	// Models are the model names the model door serves.
	Models []string `json:"models,omitempty"`
	// Approvals are the user's answers.
	Approvals []v1alpha1.Approval `json:"approvals,omitempty"`
	// AwaitingApproval lists the action ids the attempt waits on.
	AwaitingApproval []string `json:"awaitingApproval,omitempty"`
	// Advice is the advice recorded for the attempt (a reviewer's, a stop
	// hook's), for an agent that wants to read it. It never changes a
	// decision: only the operator ends, pauses or extends a run.
	Advice []v1alpha1.Advice `json:"advice,omitempty"`
	// Steps and LastProgressStep are the step counters.
	Steps            int64 `json:"steps,omitempty"`
	LastProgressStep int64 `json:"lastProgressStep,omitempty"`
	// FinishProposed is true once the agent proposed to finish.
	FinishProposed bool `json:"finishProposed,omitempty"`
	// Publication is what was durably delivered.
	Publication v1alpha1.Publication `json:"publication,omitzero"`
	// Checkpoint is the attempt's resume token.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Revision grows with every change of this view.
	Revision uint64 `json:"revision"`
}

// Stopped reports whether the attempt must stop: the run is Terminated or
// the attempt superseded.
func (a Attempt) Stopped() bool {
	return a.Phase == v1alpha1.PhaseTerminated || a.Superseded
}

// StepRequest reports one step of the agent loop (POST /self/steps): a
// step beyond the model turns the gateway served.
type StepRequest struct {
	// Progress is the agent's claim that the step made progress. It is
	// accepted and ignored: progress is what the gateway sees (a new tool
	// call, a model answer that repeats none of the last ones).
	Progress bool `json:"progress"`
}

// StepResponse answers a StepRequest.
type StepResponse struct {
	// Step is the step's number.
	Step int64 `json:"step"`
}

// FaultRequest reports a local fault (POST /self/faults). A fault changes no
// phase unless escalated; an escalated fault is persisted before the answer.
type FaultRequest struct {
	Scope     v1alpha1.FaultScope `json:"scope"`
	Kind      string              `json:"kind"`
	Retryable bool                `json:"retryable,omitempty"`
	Message   string              `json:"message,omitempty"`
	// Escalate says the agent cannot handle it: the operator treats the
	// attempt as failed.
	Escalate bool `json:"escalate,omitempty"`
}

// AdviceRequest records advice (POST /self/advice); advice never blocks,
// delays or extends a run.
type AdviceRequest struct {
	Source string `json:"source"`
	Kind   string `json:"kind"`
}

// CheckpointRequest sets the resume token (PUT /self/checkpoint).
type CheckpointRequest struct {
	Checkpoint string `json:"checkpoint"`
}

// ToolCallRequest reports a tool call before it is dispatched (POST
// /self/toolcalls). The gateway checks the catalogue, the phase, the grant
// and the permission matrix, waits for an approval when one is needed, counts
// the call and its fingerprint, and — for a tool with a side effect —
// persists a write-ahead record before it answers. Only a 200 answer allows
// the call.
type ToolCallRequest struct {
	// Tool is the catalogue name.
	Tool string `json:"tool"`
	// Arguments are the call's arguments (a JSON object).
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Context distinguishes the same call in another context (e.g. another
	// report section) for repeat detection and approvals.
	Context string `json:"context,omitempty"`
	// WaitSeconds bounds the wait for an approval (default 60, at most 300);
	// when it ends first the answer is approval_pending and the call may be
	// reported again.
	WaitSeconds int64 `json:"waitSeconds,omitempty"`
}

// ToolCall is an admitted tool call.
type ToolCall struct {
	// ID names the call in its outcome report.
	ID string `json:"id"`
	// Tool is the catalogue name.
	Tool string `json:"tool"`
	// Fingerprint is the canonical hash of tool, arguments and context.
	Fingerprint string `json:"fingerprint"`
	// ActionID is the id an approval names.
	ActionID string `json:"actionID"`
	// IdempotencyKey is set for idempotent tools: pass it to the tool so a
	// replay is harmless.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// Effect and Risk are the catalogue's.
	Effect v1alpha1.Effect `json:"effect"`
	Risk   v1alpha1.Risk   `json:"risk"`
	// WriteAhead is true when a write-ahead record was persisted; the
	// outcome report removes it.
	WriteAhead bool `json:"writeAhead,omitempty"`
}

// ToolOutcomeRequest reports a dispatched call's outcome (POST
// /self/toolcalls/{id}/outcome). No error means it succeeded.
type ToolOutcomeRequest struct {
	Error *ToolError `json:"error,omitempty"`
}

// ToolError is a failed call's fault.
type ToolError struct {
	Kind      string `json:"kind"`
	Message   string `json:"message,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
}

// ReportPlanRequest sets the report's planned sections (PUT /self/report/plan).
type ReportPlanRequest struct {
	Sections []string `json:"sections"`
}

// PublishRequest publishes one planned section (POST /self/report/sections).
// CallID names the admitted report.publish tool call whose arguments were
// {"section": …, "content": …}: publication is the effect of that call.
type PublishRequest struct {
	CallID  string `json:"callID"`
	Section string `json:"section"`
	Content string `json:"content"`
}

// Report is the run's report as the gateway persisted it.
type Report struct {
	// Location is where it is, e.g. configmap/<run>-report.
	Location string `json:"location"`
	// Sections are the planned sections, in order.
	Sections []ReportSection `json:"sections"`
	// Committed is how many planned sections are persisted.
	Committed int32 `json:"committed"`
}

// ReportSection is one planned section.
type ReportSection struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Published bool   `json:"published"`
}

// SettleResponse is the settlement the gateway persisted (POST /self/settle),
// computed from what the report holds, not from what the agent believes.
type SettleResponse struct {
	Settlement      v1alpha1.Settlement `json:"settlement"`
	BlocksPlanned   int32               `json:"blocksPlanned"`
	BlocksCommitted int32               `json:"blocksCommitted"`
}

// ToolReportPublish is the gateway's publication tool: the only tool (with
// the model door) served while the run is Finalizing.
const ToolReportPublish = v1alpha1.BuiltinToolReportPublish

// ToolNotesWrite is the gateway's built-in notes tool: it appends a note to
// the run's notes (key notes.jsonl of the report ConfigMap <run>-report),
// kept across attempts.
const ToolNotesWrite = v1alpha1.BuiltinToolNotesWrite

// FaultKind turns a provider's error code (rate_limit_exceeded,
// insufficient_quota, or an already PascalCase kind) into a fault kind
// (RateLimitExceeded). It returns "" for a code it cannot use.
func FaultKind(code string) string {
	var b []byte
	up := true
	for i := 0; i < len(code) && len(b) < 128; i++ {
		c := code[i]
		switch {
		case c == '_' || c == '-' || c == '.' || c == ' ':
			up = true
		case c >= 'a' && c <= 'z':
			if up {
				c -= 'a' - 'A'
			}
			b, up = append(b, c), false
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9' && len(b) > 0:
			b, up = append(b, c), false
		default:
			return ""
		}
	}
	return string(b)
}

// ProviderFault is the fault kind of a provider's HTTP error status and
// whether a retry may succeed. The gateway records provider faults under it
// (or under FaultKind of the provider's error code) and the Go SDK names
// them the same, so an escalation names the fault the status already counts.
func ProviderFault(status int) (kind string, retryable bool) {
	switch {
	case status == 429:
		return "RateLimited", true
	case status == 408:
		return "Timeout", true
	case status == 401 || status == 403:
		return "Unauthorized", false
	case status == 404:
		return "NotFound", false
	case status >= 500:
		return "ServerError", true
	}
	return "InvalidRequest", false
}
