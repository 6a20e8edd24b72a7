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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Labels and environment the operator puts on attempt pods.
const (
	// LabelRun is the name of the ResearchRun, on RunAttempts, pods and report ConfigMaps.
	LabelRun = "agentrun.dev/run"
	// LabelAttempt is the attempt number, on RunAttempts and pods.
	LabelAttempt = "agentrun.dev/attempt"
	// LabelSession is the name of the Session, on RunAttempts and pods.
	LabelSession = "agentrun.dev/session"
	// LabelProviderKey marks a Secret whose keys the gateway may send to a
	// model provider ("true"). Without it a RuntimePolicy naming the Secret
	// is refused at request time: writing a policy alone cannot make the
	// gateway send an arbitrary Secret to a URL of the writer's choice.
	LabelProviderKey = "agentrun.dev/provider-key"

	// EnvNamespace tells the agent its namespace.
	EnvNamespace = "AGENTRUN_NAMESPACE"
	// EnvRun tells the agent its ResearchRun's name.
	EnvRun = "AGENTRUN_RUN"
	// EnvAttempt tells the agent its attempt number.
	EnvAttempt = "AGENTRUN_ATTEMPT"
	// EnvRunAttempt tells the agent the name of its RunAttempt.
	EnvRunAttempt = "AGENTRUN_RUNATTEMPT"
)

// Grant is the allowance of one attempt, in absolute counters of that attempt's
// own usage. agentrun-gateway refuses any request beyond it (HTTP 429, a
// refusal, not a failure) and reserves a request's tokens before dispatch, so
// usage cannot cross it. Usage recorded above the grant is a PolicyViolation.
type Grant struct {
	// modelRequests the attempt may have made in total.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ModelRequests int64 `json:"modelRequests,omitempty"`
	// toolCalls the attempt may have made in total.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ToolCalls int64 `json:"toolCalls,omitempty"`
	// tokens the attempt may have used in total; unset means not budgeted.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`
	// cost the attempt's model requests may have cost in total; unset means
	// not budgeted.
	// +optional
	Cost *Money `json:"cost,omitempty"`
	// finalizeOnly is true in Finalizing: only output work (publish, settle)
	// from the reserve; research tools are refused.
	// +optional
	FinalizeOnly bool `json:"finalizeOnly,omitempty"`
	// reserve, in Finalizing, is the output reserve this finalization grants
	// on top of the attempt's usage. The counters above add it to the usage
	// the operator last saw; the gateway serves at least its own count when it
	// learns of Finalizing (status.finalizeBase) plus the reserve, so calls it
	// admitted under the running grant in between do not eat the reserve.
	// +optional
	Reserve *Usage `json:"reserve,omitempty"`
}

// Directive is an instruction from the operator to the attempt.
type Directive struct {
	// type is Degrade (cheaper model, fewer tools) or Compress (compact context).
	// +required
	Type DirectiveType `json:"type"`
	// gate is the limit the directive comes from.
	// +required
	Gate Gate `json:"gate"`
	// message says how close the gate is, with numbers.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// PolicySnapshot is the part of the RuntimePolicy the agent needs, taken when
// the attempt starts, so the pod never reads another object.
type PolicySnapshot struct {
	// name of the RuntimePolicy.
	// +optional
	Name string `json:"name,omitempty"`
	// resolvedChain is the interceptor chain in the order to apply it.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ResolvedChain []ResolvedInterceptor `json:"resolvedChain,omitempty"`
	// tools is the tool catalogue.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Tools []Tool `json:"tools,omitempty"`
	// autoApprove lists tools that run without confirmation in Auto mode.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	AutoApprove []string `json:"autoApprove,omitempty"`
	// models the gateway serves to this attempt (Secret references, never keys).
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Models []Model `json:"models,omitempty"`
	// currency of the models' prices (the policy's spec.currency).
	// +optional
	Currency string `json:"currency,omitempty"`
	// toolServers the gateway dispatches tool calls to (Secret references,
	// never tokens).
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	ToolServers []ToolServer `json:"toolServers,omitempty"`
	// approvalTimeout is how long a call waits for a decision.
	// +optional
	ApprovalTimeout *metav1.Duration `json:"approvalTimeout,omitempty"`
	// onSecurityDegraded is the policy's stricter posture while a Security
	// interceptor fails.
	// +optional
	OnSecurityDegraded *SecurityDegraded `json:"onSecurityDegraded,omitempty"`
	// authorityWait is how long a call is held while an interceptor's
	// authority is unreachable.
	// +optional
	AuthorityWait *metav1.Duration `json:"authorityWait,omitempty"`
	// compression is what the doors apply under a Compress directive.
	// +optional
	Compression *Compression `json:"compression,omitempty"`
	// events is the policy's retention of the run stream: the gateway stores
	// the attempt's events with maxAge as their TTL. Unset fields mean the
	// defaults (EventRetention.Age, Bytes).
	// +optional
	Events EventRetention `json:"events,omitzero"`
	// harness is the policy's rules for coding harnesses.
	// +optional
	Harness *HarnessPolicy `json:"harness,omitempty"`
	// children bounds the attempt's child runs (the policy's spec.children).
	// +optional
	Children *ChildrenPolicy `json:"children,omitempty"`
}

// RunAttemptSpec is written only by the operator: everything the agent needs,
// down the channel.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podUID) || (has(self.podUID) && self.podUID == oldSelf.podUID)",message="spec.podUID is set once and cannot change"
// +kubebuilder:validation:XValidation:rule="self.runName == oldSelf.runName && self.attempt == oldSelf.attempt",message="spec.runName and spec.attempt are immutable"
type RunAttemptSpec struct {
	// runName is the ResearchRun this attempt belongs to.
	// +required
	RunName string `json:"runName"`
	// attempt is the attempt number, from 1.
	// +kubebuilder:validation:Minimum=1
	// +required
	Attempt int32 `json:"attempt"`
	// goal is the run's research task.
	// +optional
	Goal string `json:"goal,omitempty"`
	// podName is the attempt pod's name.
	// +optional
	PodName string `json:"podName,omitempty"`
	// podUID is the attempt pod's UID, set once the pod exists. The gateway
	// serves this attempt only to a token bound to this pod.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// runPhase mirrors the run's phase, so the agent knows when it is
	// Finalizing (output work only) or Terminated (stop).
	// +optional
	RunPhase Phase `json:"runPhase,omitempty"`
	// superseded is true when a newer attempt replaced this one; its facts are
	// still counted but cannot drive the run's phase.
	// +optional
	Superseded bool `json:"superseded,omitempty"`
	// grant is the attempt's allowance.
	// +optional
	Grant Grant `json:"grant,omitzero"`
	// directives the agent loop should obey.
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Directives []Directive `json:"directives,omitempty"`
	// mode is the session's current permission mode; updated when it changes,
	// so a downgrade takes effect at once.
	// +optional
	Mode PermissionMode `json:"mode,omitempty"`
	// policy is the snapshot of the RuntimePolicy taken when the attempt started.
	// +optional
	Policy PolicySnapshot `json:"policy,omitzero"`
	// approvals copied from the run.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`
	// deadline is when the run's deadline passes. The gateway bounds every
	// model request and door tool call of a running attempt by it.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// hardDeadline is when the run is ended whatever its phase: the deadline
	// plus the finalization grace. A finalizing attempt's calls are bounded
	// by it (only the reserve's time counts).
	// +optional
	HardDeadline *metav1.Time `json:"hardDeadline,omitempty"`
	// heartbeatInterval is how often the agent must report heartbeatTime.
	// +optional
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`
}

// CallCount counts one tool call fingerprint, for repeat detection.
type CallCount struct {
	// tool name.
	// +required
	Tool string `json:"tool"`
	// fingerprint is a canonical hash of tool + arguments + context.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Fingerprint string `json:"fingerprint"`
	// count of calls with this fingerprint.
	// +kubebuilder:validation:Minimum=0
	// +required
	Count int64 `json:"count"`
}

// InFlightEffect is a write-ahead record of a side-effecting tool call: added
// and persisted before the call is dispatched, removed with its outcome.
type InFlightEffect struct {
	// id of the call.
	// +kubebuilder:validation:MaxLength=253
	// +required
	ID string `json:"id"`
	// tool name.
	// +required
	Tool string `json:"tool"`
	// effect of the tool.
	// +required
	Effect Effect `json:"effect"`
	// idempotencyKey, when set, makes replaying the call safe; without one an
	// attempt that fails with this record in flight is UnsafeToRecover.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// startedAt is when the record was written.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// fingerprint of the call (tool, canonical arguments, context): the
	// gateway never dispatches a non-idempotent call with this fingerprint
	// again while the record says Unknown.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
	// outcome is empty while the call is under way and Unknown when the
	// gateway cannot know whether it took effect (a timeout, a lost
	// connection, a restart): the record then stays.
	// +optional
	Outcome EffectOutcome `json:"outcome,omitempty"`
	// message says why the outcome is unknown.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// EffectOutcome is what the gateway knows of a dispatched side effect.
// +kubebuilder:validation:Enum=Unknown
type EffectOutcome string

// OutcomeUnknown: the call may or may not have taken effect.
const OutcomeUnknown EffectOutcome = "Unknown"

// FaultScope says where a fault happened.
// +kubebuilder:validation:Enum=Tool;Provider;Reviewer;Hook;Agent
type FaultScope string

const (
	// FaultScopeTool: a tool call failed.
	FaultScopeTool FaultScope = "Tool"
	// FaultScopeProvider: the model provider failed or refused.
	FaultScopeProvider FaultScope = "Provider"
	// FaultScopeReviewer: a reviewer module failed or went stale.
	FaultScopeReviewer FaultScope = "Reviewer"
	// FaultScopeHook: a stop hook or other hook failed.
	FaultScopeHook FaultScope = "Hook"
	// FaultScopeAgent: the agent loop itself.
	FaultScopeAgent FaultScope = "Agent"
)

// Fault is a counted local fault. Local faults change no phase unless escalated.
type Fault struct {
	// scope is where the fault happened.
	// +required
	Scope FaultScope `json:"scope"`
	// kind is a short PascalCase cause, e.g. Timeout, QuotaExceeded.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Kind string `json:"kind"`
	// retryable says whether the agent may retry.
	// +optional
	Retryable bool `json:"retryable,omitempty"`
	// count of occurrences.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Count int64 `json:"count,omitempty"`
	// lastMessage of the latest occurrence.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	LastMessage string `json:"lastMessage,omitempty"`
	// escalated says the agent cannot handle it: the operator treats the
	// attempt as failed.
	// +optional
	Escalated bool `json:"escalated,omitempty"`
}

// BudgetUnit names a unit of a budget.
// +kubebuilder:validation:Enum=ModelRequests;ToolCalls;Tokens;Cost
type BudgetUnit string

// Budget units.
const (
	// BudgetUnitModelRequests counts model requests.
	BudgetUnitModelRequests BudgetUnit = "ModelRequests"
	// BudgetUnitToolCalls counts tool calls.
	BudgetUnitToolCalls BudgetUnit = "ToolCalls"
	// BudgetUnitTokens counts model tokens.
	BudgetUnitTokens BudgetUnit = "Tokens"
	// BudgetUnitCost counts model cost, in micro-units of the policy's
	// currency where a count is an integer (GrantExhaustion).
	BudgetUnitCost BudgetUnit = "Cost"
)

// GrantExhaustion is a request refused on an attempt's working grant. For
// the Cost unit, used and granted count micro-units of the currency.
type GrantExhaustion struct {
	// unit is the unit the request did not fit in.
	// +required
	Unit BudgetUnit `json:"unit"`
	// used is the attempt's usage of that unit when it was refused
	// (for tokens, with the reservations of requests under way).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Used int64 `json:"used,omitempty"`
	// granted is the attempt's grant of that unit.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Granted int64 `json:"granted,omitempty"`
	// message is the refusal as the agent was told it.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
	// time of the refusal.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// Advice is a counted advisory fact (reviewer, stop hook). Advice is recorded
// and never blocks, delays or extends a run.
type Advice struct {
	// source of the advice, e.g. reviewer, stop-hook.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Source string `json:"source"`
	// kind of advice, e.g. Continue, Block, NeedsChanged.
	// +kubebuilder:validation:MaxLength=128
	// +required
	Kind string `json:"kind"`
	// count of occurrences.
	// +optional
	Count int64 `json:"count,omitempty"`
}

// Publication is what the attempt durably delivered.
type Publication struct {
	// blocksPlanned is how many output blocks (e.g. report sections) the agent planned.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BlocksPlanned int32 `json:"blocksPlanned,omitempty"`
	// blocksCommitted is how many were durably published.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BlocksCommitted int32 `json:"blocksCommitted,omitempty"`
	// settlement is what was delivered, set once publication settles.
	// +optional
	Settlement Settlement `json:"settlement,omitempty"`
	// settled is true once the agent has persisted its settlement.
	// +optional
	Settled bool `json:"settled,omitempty"`
	// location of the published output, e.g. configmap/<run>-report.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Location string `json:"location,omitempty"`
}

// RunAttemptStatus is the attempt's facts: a bounded reported state, not a
// log. agentrun-gateway is their one author (usage from what it dispatched,
// the rest from what the attempt's pod reports through it); only the gateway
// and the operator may write it.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.finalizeBase) || (has(self.finalizeBase) && self.finalizeBase == oldSelf.finalizeBase)",message="status.finalizeBase is recorded once and cannot change"
type RunAttemptStatus struct {
	// observedGeneration is the spec generation the agent last read.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// usage is the attempt's monotonic usage counters.
	// +optional
	Usage Usage `json:"usage,omitzero"`
	// finalizeBase is the attempt's usage when the gateway first served it as
	// finalizing: spec.grant.reserve is served on top of it, once. The
	// gateway records it (durably, before it admits anything under the
	// reserve) and never changes it; a restarted gateway takes it from here,
	// and the operator judges the attempt's usage against the same grant
	// (lifecycle.EffectiveGrant).
	// +optional
	FinalizeBase *Usage `json:"finalizeBase,omitempty"`
	// grantExhausted is the gateway's refusal of a request on this attempt's
	// working grant: the fact the termination owner decides exhaustion from,
	// with the counts it was decided on. It covers what the counters alone
	// do not show: a token grant with tokens left, but too few for any
	// request's bound. The first refusal is kept.
	// +optional
	GrantExhausted *GrantExhaustion `json:"grantExhausted,omitempty"`
	// children are the budgets this attempt carved for child runs, durable
	// before each child is created (docs/children.md).
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Children []ChildCarve `json:"children,omitempty"`
	// steps is the attempt's monotonic step counter.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Steps int64 `json:"steps,omitempty"`
	// lastProgressStep is the last step that made progress.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LastProgressStep int64 `json:"lastProgressStep,omitempty"`
	// calls are the top fingerprints by count, for repeat detection.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Calls []CallCount `json:"calls,omitempty"`
	// inFlight are write-ahead records of side-effecting calls under way.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	InFlight []InFlightEffect `json:"inFlight,omitempty"`
	// faults are counted local faults.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Faults []Fault `json:"faults,omitempty"`
	// advice are counted advisory facts.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Advice []Advice `json:"advice,omitempty"`
	// awaitingApproval lists the calls waiting for a decision.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=actionID
	// +optional
	AwaitingApproval []ApprovalRequest `json:"awaitingApproval,omitempty"`
	// usedApprovals are the positions in spec.approvals (append-only, so a
	// position names one approval for the run's life) of the Approve
	// decisions that admitted a call of this attempt: a Once approval listed
	// here admits nothing more, a Standing one keeps admitting identical
	// calls. Durable before the call it admitted is dispatched, so a
	// restarted gateway never spends an approval twice.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	UsedApprovals []int32 `json:"usedApprovals,omitempty"`
	// finishProposed is true once the agent proposes to finish.
	// +optional
	FinishProposed bool `json:"finishProposed,omitempty"`
	// publication is what was durably delivered.
	// +optional
	Publication Publication `json:"publication,omitzero"`
	// checkpoint is an opaque resume token for a replacement attempt.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Checkpoint string `json:"checkpoint,omitempty"`
	// securityPosture is set while the gateway holds the attempt to the
	// policy's stricter posture (spec.policy.onSecurityDegraded) because a
	// Security interceptor fails; unset is the normal posture.
	// +optional
	SecurityPosture *SecurityPosture `json:"securityPosture,omitempty"`
	// heartbeatTime is when the agent last reported it is alive.
	// +optional
	HeartbeatTime *metav1.Time `json:"heartbeatTime,omitempty"`
	// liveness names the gateway replica that governs the attempt's
	// liveness: while that replica renews its Lease and has not written
	// silentSince, the attempt is alive. Written only when the governing
	// replica changes and when the attempt goes silent or speaks again, never
	// periodically.
	// +optional
	Liveness *AttemptLiveness `json:"liveness,omitempty"`
}

// AttemptLiveness is the gateway's liveness fact of an attempt. The attempt's
// heartbeat is the gateway seeing it (a request under way, an open watch, a
// call within spec.heartbeatInterval); the gateway's own heartbeat is its
// Lease. The operator counts the heartbeat timeout from silentSince when set,
// else from the Lease's last renewal.
type AttemptLiveness struct {
	// gateway is the namespace/name of the coordination.k8s.io Lease of the
	// gateway replica that governs the attempt.
	// +kubebuilder:validation:MaxLength=317
	// +required
	Gateway string `json:"gateway"`
	// holder is the Lease's holderIdentity of the gateway process that took
	// the attempt: a Lease held by another identity means that process is
	// gone.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Holder string `json:"holder"`
	// since is when that process began governing the attempt.
	// +required
	Since metav1.Time `json:"since"`
	// silentSince is when the governing gateway last saw the attempt (in
	// whole seconds, rounded up), set once it has not seen it for
	// spec.heartbeatInterval (no request under way, no open watch); cleared
	// when the agent calls again.
	// +optional
	SilentSince *metav1.Time `json:"silentSince,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ra,categories=agentrun
// +kubebuilder:printcolumn:name="Run",type=string,JSONPath=`.spec.runName`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.spec.attempt`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Steps",type=integer,JSONPath=`.status.steps`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.spec.runPhase`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RunAttempt is the two-way channel of one attempt of a ResearchRun: spec carries
// grants and directives down (written by the operator), status carries facts up
// (written by agentrun-gateway for the attempt's pod). Named <run>-<attempt>,
// owned by the run.
type RunAttempt struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is written only by the operator.
	// +required
	Spec RunAttemptSpec `json:"spec"`

	// status is written only by agentrun-gateway (or the operator).
	// +optional
	Status RunAttemptStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// RunAttemptList contains a list of RunAttempt
type RunAttemptList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []RunAttempt `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &RunAttempt{}, &RunAttemptList{})
		return nil
	})
}
