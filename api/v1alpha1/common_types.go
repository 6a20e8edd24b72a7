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

package v1alpha1

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a ResearchRun is in its life. Only the ResearchRun reconciler
// (the termination owner) writes it; the API server refuses a write that leaves
// Terminated or that goes from Finalizing back to an earlier phase.
// +kubebuilder:validation:Enum=Pending;Queued;Running;Recovering;Finalizing;Terminated
type Phase string

const (
	// PhasePending: accepted, not yet placed in its session's queue.
	PhasePending Phase = "Pending"
	// PhaseQueued: waiting for its session; another run of the session is active.
	PhaseQueued Phase = "Queued"
	// PhaseRunning: an attempt pod is working from the working allowance.
	PhaseRunning Phase = "Running"
	// PhaseRecovering: the previous attempt failed with nothing unsafe in flight;
	// a new attempt is being started with the same run identity and ledger.
	PhaseRecovering Phase = "Recovering"
	// PhaseFinalizing: one-way; the attempt may only do output work (publish,
	// settle) from the output reserve. Entered at most once.
	PhaseFinalizing Phase = "Finalizing"
	// PhaseTerminated: absorbing; the attempt pod has stopped and reason and
	// settlement are final.
	PhaseTerminated Phase = "Terminated"
)

// IsActive reports whether a run in this phase holds its session.
func (p Phase) IsActive() bool {
	return p == PhaseRunning || p == PhaseRecovering || p == PhaseFinalizing
}

// IsWaiting reports whether a run in this phase waits for admission: it has
// not started. A run with no phase yet ("") counts as Pending.
func (p Phase) IsWaiting() bool {
	return p == "" || p == PhasePending || p == PhaseQueued
}

// AdmissionOrder orders two runs of a session as they are admitted (first in,
// first out): by creation time, the name breaking ties. It is negative when
// run a (created at aCreated) comes before run b, as slices.SortFunc wants.
func AdmissionOrder(aCreated time.Time, aName string, bCreated time.Time, bName string) int {
	if c := aCreated.Compare(bCreated); c != 0 {
		return c
	}
	return strings.Compare(aName, bName)
}

// Reason says why a run is finalizing or why it ended.
// +kubebuilder:validation:Enum=Completed;Cancelled;BudgetExhausted;DeadlineExceeded;StepLimit;RepeatedCall;NoProgress;UnsafeToRecover;RecoveryExhausted;PolicyViolation;QueueFull;QueueTimeout;FinalizeRequested;AgentFailed
type Reason string

const (
	// ReasonCompleted: the agent proposed finish and publication settled.
	ReasonCompleted Reason = "Completed"
	// ReasonCancelled: spec.stop was Cancel (or the session was deleted); no
	// finalization model call was made.
	ReasonCancelled Reason = "Cancelled"
	// ReasonBudgetExhausted: the working budget (budget minus output reserve) was used up.
	ReasonBudgetExhausted Reason = "BudgetExhausted"
	// ReasonDeadlineExceeded: spec.budget.deadline passed.
	ReasonDeadlineExceeded Reason = "DeadlineExceeded"
	// ReasonStepLimit: spec.gates.maxSteps was reached.
	ReasonStepLimit Reason = "StepLimit"
	// ReasonRepeatedCall: one tool call fingerprint reached spec.gates.sameCallLimit.
	ReasonRepeatedCall Reason = "RepeatedCall"
	// ReasonNoProgress: spec.gates.noProgressLimit steps passed without progress.
	ReasonNoProgress Reason = "NoProgress"
	// ReasonUnsafeToRecover: an attempt failed while a side effect without an
	// idempotency key was in flight; its outcome is unknown, so it is never replayed.
	ReasonUnsafeToRecover Reason = "UnsafeToRecover"
	// ReasonRecoveryExhausted: attempts failed spec.recovery.maxAttempts times.
	ReasonRecoveryExhausted Reason = "RecoveryExhausted"
	// ReasonPolicyViolation: the agent reported usage above its grant, or a
	// monotonic counter went backwards.
	ReasonPolicyViolation Reason = "PolicyViolation"
	// ReasonQueueFull: the session's queue was at its limit when the run arrived.
	ReasonQueueFull Reason = "QueueFull"
	// ReasonQueueTimeout: the run waited in its session's queue longer than the timeout.
	ReasonQueueTimeout Reason = "QueueTimeout"
	// ReasonFinalizeRequested: spec.stop was Finalize: the run wrapped up from
	// its output reserve at the user's request.
	ReasonFinalizeRequested Reason = "FinalizeRequested"
	// ReasonAgentFailed: the attempt failed in a way a new attempt cannot fix
	// — it escalated a fault that is not retryable (a bad key, a bad
	// configuration), so the run is not recovered but finalized from the
	// reserve (or ended) — or in a way no other reason describes.
	ReasonAgentFailed Reason = "AgentFailed"
)

// Settlement says what was durably delivered, as persisted by the attempt pod.
// +kubebuilder:validation:Enum=Complete;Partial;None
type Settlement string

const (
	// SettlementComplete: every planned output block was durably published.
	SettlementComplete Settlement = "Complete"
	// SettlementPartial: some, not all, planned output blocks were durably published.
	SettlementPartial Settlement = "Partial"
	// SettlementNone: nothing was durably published.
	SettlementNone Settlement = "None"
)

// PermissionMode is a Session's permission level for tool calls, from least to
// most permissive.
// +kubebuilder:validation:Enum=ReadOnly;Plan;Edit;Auto;Full
type PermissionMode string

const (
	// ModeReadOnly allows only tools whose effect is None and that are not
	// previews (tools[].preview).
	ModeReadOnly PermissionMode = "ReadOnly"
	// ModePlan allows every tool whose effect is None (search, read, and
	// preview); nothing that writes.
	ModePlan PermissionMode = "Plan"
	// ModeEdit allows writes, each confirmed by an approval.
	ModeEdit PermissionMode = "Edit"
	// ModeAuto runs the policy's autoApprove tools without confirmation and confirms the rest.
	ModeAuto PermissionMode = "Auto"
	// ModeFull needs no confirmation, except for High-risk tools, which are confirmed in every mode.
	ModeFull PermissionMode = "Full"
)

// Rank orders permission modes from least (0) to most permissive; -1 if unknown.
func (m PermissionMode) Rank() int {
	switch m {
	case ModeReadOnly:
		return 0
	case ModePlan:
		return 1
	case ModeEdit:
		return 2
	case ModeAuto:
		return 3
	case ModeFull:
		return 4
	}
	return -1
}

// Risk is a tool's risk level.
// +kubebuilder:validation:Enum=Low;Medium;High
type Risk string

const (
	// RiskLow: reversible, local effect.
	RiskLow Risk = "Low"
	// RiskMedium: effect visible to others but recoverable.
	RiskMedium Risk = "Medium"
	// RiskHigh: irreversible or externally visible; confirmed in every permission mode.
	RiskHigh Risk = "High"
)

// Effect is what a tool call changes outside the agent.
// +kubebuilder:validation:Enum=None;Write;External
type Effect string

const (
	// EffectNone: reads only (search, read, preview).
	EffectNone Effect = "None"
	// EffectWrite: writes state the run owns (notes, scratch files).
	EffectWrite Effect = "Write"
	// EffectExternal: changes the world outside the run (publish, send, pay).
	EffectExternal Effect = "External"
)

// InterceptorClass says what an interceptor protects or provides.
// +kubebuilder:validation:Enum=Security;Observability;Resource
type InterceptorClass string

const (
	// ClassSecurity: authentication, authorization, redaction. Must fail closed.
	ClassSecurity InterceptorClass = "Security"
	// ClassObservability: logging, audit, tracing, metrics.
	ClassObservability InterceptorClass = "Observability"
	// ClassResource: rate limiting, quotas, caching.
	ClassResource InterceptorClass = "Resource"
)

// InterceptorPhase says when an interceptor runs around a model request or tool call.
// +kubebuilder:validation:Enum=Pre;Around;Post
type InterceptorPhase string

const (
	// InterceptorPre runs before the call and may veto it.
	InterceptorPre InterceptorPhase = "Pre"
	// InterceptorAround wraps the call and must release what it holds on every path.
	InterceptorAround InterceptorPhase = "Around"
	// InterceptorPost runs after the call with its outcome.
	InterceptorPost InterceptorPhase = "Post"
)

// InterceptorEnforcement says who runs an interceptor.
// +kubebuilder:validation:Enum=Gateway;Agent
type InterceptorEnforcement string

const (
	// EnforcementGateway: agentrun-gateway runs the interceptor around every
	// call of every agent, whatever its language. Admission refuses a name the
	// gateway does not implement.
	EnforcementGateway InterceptorEnforcement = "Gateway"
	// EnforcementAgent: only an agent that registers an implementation itself
	// (an SDK hook) runs the interceptor; the gateway skips it, and it binds
	// no agent that does not. Never allowed for Security-class interceptors.
	EnforcementAgent InterceptorEnforcement = "Agent"
)

// DefaultInterceptorTimeout bounds one interceptor hook when its entry sets
// no timeout.
const DefaultInterceptorTimeout = 2 * time.Second

// MinInterceptorTimeout and MaxInterceptorTimeout bound an interceptor
// entry's timeout.
const (
	MinInterceptorTimeout = time.Millisecond
	MaxInterceptorTimeout = time.Minute
)

// Posture is what happens when an interceptor itself errors.
// +kubebuilder:validation:Enum=Deny;Allow
type Posture string

const (
	// PostureDeny (fail closed): the call is denied, naming the interceptor.
	PostureDeny Posture = "Deny"
	// PostureAllow (fail open): the error is logged and counted and the chain continues.
	PostureAllow Posture = "Allow"
)

// StopRequest is a user's request to end a run.
// +kubebuilder:validation:Enum=Cancel;Finalize
type StopRequest string

const (
	// StopCancel ends the run at once: grant zero, pod deleted, no finalization.
	StopCancel StopRequest = "Cancel"
	// StopFinalize asks the run to wrap up with what it has, from the output reserve.
	StopFinalize StopRequest = "Finalize"
)

// ApprovalDecision is a user's answer to an action that needs confirmation.
// +kubebuilder:validation:Enum=Approve;Deny
type ApprovalDecision string

const (
	// DecisionApprove lets the action run.
	DecisionApprove ApprovalDecision = "Approve"
	// DecisionDeny refuses the action; the agent records a local refusal and goes on.
	DecisionDeny ApprovalDecision = "Deny"
)

// DirectiveType is an instruction from the operator to the attempt.
// +kubebuilder:validation:Enum=Degrade;Compress
type DirectiveType string

const (
	// DirectiveDegrade: switch to a cheaper model and fewer tools.
	DirectiveDegrade DirectiveType = "Degrade"
	// DirectiveCompress: compact the context.
	DirectiveCompress DirectiveType = "Compress"
)

// Gate names the limit a directive or a finalization came from.
// +kubebuilder:validation:Enum=Budget;Deadline;Steps;SameCall;NoProgress
type Gate string

const (
	// GateBudget is the working budget (budget minus output reserve).
	GateBudget Gate = "Budget"
	// GateDeadline is spec.budget.deadline.
	GateDeadline Gate = "Deadline"
	// GateSteps is spec.gates.maxSteps.
	GateSteps Gate = "Steps"
	// GateSameCall is spec.gates.sameCallLimit.
	GateSameCall Gate = "SameCall"
	// GateNoProgress is spec.gates.noProgressLimit.
	GateNoProgress Gate = "NoProgress"
)

// Condition types on ResearchRun (Ready, Reconciling and Stalled also on
// Session and RuntimePolicy). Ready, Reconciling and Stalled follow the
// kstatus conventions (sigs.k8s.io/cli-utils/pkg/kstatus), which Flux and
// Argo CD read: Reconciling=True is InProgress, Stalled=True is Failed, and
// neither True with observedGeneration current is Current.
const (
	// ConditionReady is True while the run is Running and healthy, and when it
	// terminated with an end kstatus reads as Current (see
	// lifecycle.RunHealth); False otherwise. On a Session: its policy exists
	// and is valid; on a RuntimePolicy: its chain and catalogue are valid.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the run is not Terminated (Pending,
	// Queued, Running, Recovering, Finalizing, or stopping), with the phase
	// (or Stopping) as its reason and the run's message; False/Terminated
	// once it is. On a Session: True while its policy does not exist or is
	// not resolved yet. kstatus reads it as InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionSucceeded is True only for Terminated/Completed with settlement Complete.
	ConditionSucceeded = "Succeeded"
	// ConditionFinalizing is True while the run finalizes from its output reserve.
	ConditionFinalizing = "Finalizing"
	// ConditionRecovering is True while a failed attempt is being replaced.
	ConditionRecovering = "Recovering"
	// ConditionStalled is True when the run terminated with an end kstatus
	// must read as Failed (see lifecycle.RunHealth), with the run's reason;
	// on a RuntimePolicy whose chain or catalogue is invalid, and on a
	// Session whose policy is. Set False (or never set) otherwise.
	ConditionStalled = "Stalled"
	// ConditionValid is True when a RuntimePolicy's chain and catalogue pass validation.
	ConditionValid = "Valid"
	// ConditionAwaitingApproval is True while a tool call of the run's
	// current attempt waits for a decision (status.pendingApprovals).
	ConditionAwaitingApproval = "AwaitingApproval"
	// ConditionSecurityDegraded is True while the gateway holds the run's
	// current attempt to its policy's stricter posture because a Security
	// interceptor fails (status.securityPosture).
	ConditionSecurityDegraded = "SecurityDegraded"
)

// Usage is a set of counters in the budget's units.
type Usage struct {
	// modelRequests is the number of model (LLM) requests.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ModelRequests int64 `json:"modelRequests,omitempty"`
	// toolCalls is the number of tool calls.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ToolCalls int64 `json:"toolCalls,omitempty"`
	// tokens is the number of model tokens (prompt plus completion).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
	// cost is what the model requests cost, in the policy's currency
	// (tokens times the model's prices), e.g. "1.25".
	// +optional
	Cost Money `json:"cost,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the referent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// Tool is an entry of a RuntimePolicy's tool catalogue.
type Tool struct {
	// name is the tool's identifier as the agent calls it, e.g. "http.get".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`
	// +required
	Name string `json:"name"`
	// risk is the tool's risk level; High-risk calls are confirmed in every mode.
	// +required
	Risk Risk `json:"risk"`
	// effect is what a call changes outside the agent.
	// +required
	Effect Effect `json:"effect"`
	// idempotent declares that repeating a call with the same idempotency key
	// has the effect of one call. An in-flight call of an idempotent tool does
	// not prevent recovery.
	// +optional
	Idempotent bool `json:"idempotent,omitempty"`
	// description is shown to the model and to approvers.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// server names the spec.toolServers entry that serves the tool; the
	// gateway's MCP door dispatches the call there. Empty: a tool the gateway
	// itself serves (report.publish, notes.write) or, for effect None only, a
	// tool the agent runs in its own process (admitted through the agent
	// API). A Write or External tool must be served by a server or built in.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Server string `json:"server,omitempty"`
	// preview marks an effect-None tool that shows what a write would do
	// (a dry run, a diff) without doing it: Plan mode may call it, ReadOnly
	// may not.
	// +optional
	Preview bool `json:"preview,omitempty"`
	// degradable marks a tool the run can do without: while the attempt
	// carries a Degrade directive the tool door leaves it out of tools/list
	// and refuses its calls (tool_degraded), as the agent API does. The
	// output tool (report.publish) is never withheld.
	// +optional
	Degradable bool `json:"degradable,omitempty"`
}

// The tools the gateway itself serves (tools[].server stays empty): a
// catalogue may list them with any risk and effect; every other Write or
// External tool must name a spec.toolServers entry.
const (
	// BuiltinToolReportPublish publishes a block of the run's report.
	BuiltinToolReportPublish = "report.publish"
	// BuiltinToolNotesWrite writes the run's working notes.
	BuiltinToolNotesWrite = "notes.write"
)

// IsBuiltinTool reports whether name is a tool the gateway serves itself.
func IsBuiltinTool(name string) bool {
	return name == BuiltinToolReportPublish || name == BuiltinToolNotesWrite ||
		name == BuiltinToolRunSpawn || name == BuiltinToolRunChildren
}

// ApprovalRequest is a tool call waiting for a person's decision, bound to
// the run, the attempt, the tool and a hash of its canonical arguments (the
// action id), and refused with ApprovalExpired when expiresAt passes.
type ApprovalRequest struct {
	// actionID is what an Approval names (spec.approvals[].actionID).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ActionID string `json:"actionID"`
	// tool the call is for.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Tool string `json:"tool"`
	// risk of the tool.
	// +optional
	Risk Risk `json:"risk,omitempty"`
	// attempt whose call waits (ResearchRun status only).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// summary of the arguments, redacted of secrets and truncated: the
	// one-line view of events and conditions. Approvers read arguments.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Summary string `json:"summary,omitempty"`
	// arguments are the call's canonical JSON arguments, redacted of
	// secrets, in full when they fit MaxApprovalArguments bytes; longer ones
	// are cut there and argumentsTruncated is set.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	Arguments string `json:"arguments,omitempty"`
	// argumentsBytes is the length of the full redacted arguments.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ArgumentsBytes int64 `json:"argumentsBytes,omitempty"`
	// argumentsSHA256 is the hex SHA-256 of the full redacted arguments.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ArgumentsSHA256 string `json:"argumentsSHA256,omitempty"`
	// argumentsTruncated says arguments holds only the first
	// MaxApprovalArguments bytes: such a call is approved only by an
	// Approval that names argumentsSHA256, so nobody approves what they
	// could not see without saying which arguments they mean.
	// +optional
	ArgumentsTruncated bool `json:"argumentsTruncated,omitempty"`
	// requestedAt is when the request was made.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// expiresAt is when the call is refused with ApprovalExpired if no
	// decision came (the policy's approvalTimeout after requestedAt).
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// SecurityPosture is the stricter posture a run is held to while a Security
// interceptor of its policy fails (RuntimePolicy spec.onSecurityDegraded).
type SecurityPosture struct {
	// posture is ConfirmAll or DenyWrites.
	// +required
	Posture DegradedPosture `json:"posture"`
	// since is when the run turned stricter.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// interceptor is the Security interceptor whose errors did it.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Interceptor string `json:"interceptor,omitempty"`
	// errorRate is that interceptor's error rate within the window, in
	// percent, when the threshold was reached.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	ErrorRate int32 `json:"errorRate,omitempty"`
	// message says what happened and what it means for the run's writes.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// ResolvedInterceptor is one entry of a resolved interceptor chain, in the order
// runtimes apply it.
type ResolvedInterceptor struct {
	// name of the interceptor.
	// +required
	Name string `json:"name"`
	// class of the interceptor.
	// +required
	Class InterceptorClass `json:"class"`
	// phase of the interceptor.
	// +required
	Phase InterceptorPhase `json:"phase"`
	// priority of the interceptor within its phase; lower runs first.
	// +required
	Priority int32 `json:"priority"`
	// onError is the interceptor's posture when it errors.
	// +required
	OnError Posture `json:"onError"`
	// veto is true when the interceptor may end the call (Pre interceptors).
	// +optional
	Veto bool `json:"veto,omitempty"`
	// role of the interceptor (Authentication, Redaction, Audit, ...).
	// +optional
	Role InterceptorRole `json:"role,omitempty"`
	// buffered says an Allow-posture interceptor buffers and resends its
	// output, so an error loses nothing.
	// +optional
	Buffered bool `json:"buffered,omitempty"`
	// enforcement says who runs the interceptor: Gateway (empty means
	// Gateway) or Agent (the gateway skips it).
	// +optional
	Enforcement InterceptorEnforcement `json:"enforcement,omitempty"`
	// timeout bounds one call of the interceptor's hook (empty:
	// DefaultInterceptorTimeout).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// registrationIndex is the interceptor's position in spec.interceptors; it
	// only breaks ties of equal phase and priority.
	// +required
	RegistrationIndex int32 `json:"registrationIndex"`
}

// Approval is a user's answer to an action that needs confirmation.
type Approval struct {
	// actionID is the id of the action the agent asked approval for (see
	// ResearchRun status.pendingApprovals).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ActionID string `json:"actionID"`
	// decision is Approve or Deny.
	// +required
	Decision ApprovalDecision `json:"decision"`
	// comment is shown to the agent and kept for audit.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Comment string `json:"comment,omitempty"`
	// approver is the user who made the decision. Stamped by the admission
	// webhook from the request's user info; a request that names anyone but
	// the requester is rejected.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Approver string `json:"approver,omitempty"`
	// time the decision was admitted. Stamped by the admission webhook; a
	// request may not set a time other than its own. A decision answers
	// only a call that was waiting at that time: the gateway honours it
	// only if time lies within the waiting request's [requestedAt,
	// expiresAt] (whole seconds); an approval without a time answers
	// nothing.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// scope is how many calls an Approve admits. Once (the default)
	// admits one dispatch of the call that waits; Standing admits, for the
	// rest of the attempt whose waiting call it answered, every identical
	// call (same action id) without asking again, until a later decision
	// for that action id replaces it. Ignored on a Deny.
	// +kubebuilder:default=Once
	// +optional
	Scope ApprovalScope `json:"scope,omitempty"`
	// argumentsSHA256 names the full redacted arguments an approver
	// approves (the request's argumentsSHA256). Required to approve a call
	// whose arguments were too long to be shown in full
	// (argumentsTruncated); checked whenever set.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +optional
	ArgumentsSHA256 string `json:"argumentsSHA256,omitempty"`
}

// ApprovalScope is how many calls one approval admits.
// +kubebuilder:validation:Enum=Once;Standing
type ApprovalScope string

const (
	// ApprovalScopeOnce admits one dispatch of the call that waits; an
	// identical call later waits for a new decision.
	ApprovalScopeOnce ApprovalScope = "Once"
	// ApprovalScopeStanding admits every identical call of the attempt
	// whose waiting call it answered, until a later decision replaces it.
	ApprovalScopeStanding ApprovalScope = "Standing"
)

// MaxApprovalArguments is the most bytes of a call's redacted arguments an
// approval request shows (ApprovalRequest.arguments).
const MaxApprovalArguments = 16 << 10

// ActionIDs returns the action ids of reqs, in order (nil for none).
func ActionIDs(reqs []ApprovalRequest) []string {
	if len(reqs) == 0 {
		return nil
	}
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ActionID
	}
	return ids
}
