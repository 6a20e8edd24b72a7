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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// OutputReserve is the part of the budget kept for finalization: when a gate
// trips, the run finalizes (publishes, settles) from the reserve instead of
// dying with nothing.
type OutputReserve struct {
	// modelRequests reserved for finalization.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ModelRequests int64 `json:"modelRequests,omitempty"`
	// toolCalls reserved for finalization (publishing).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ToolCalls int64 `json:"toolCalls,omitempty"`
	// tokens reserved for finalization.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Tokens int64 `json:"tokens,omitempty"`
	// cost reserved for finalization, in the policy's currency.
	// +optional
	Cost Money `json:"cost,omitempty"`
}

// Budget is what the run may spend. The operator is the root owner: it grants
// attempts the working allowance (budget minus reserve minus what earlier
// attempts used) and, in Finalizing, only the reserve.
// +kubebuilder:validation:XValidation:rule="!has(self.outputReserve) || !has(self.outputReserve.modelRequests) || !has(self.modelRequests) || self.outputReserve.modelRequests <= self.modelRequests",message="spec.budget.outputReserve.modelRequests must not exceed spec.budget.modelRequests"
// +kubebuilder:validation:XValidation:rule="!has(self.outputReserve) || !has(self.outputReserve.toolCalls) || !has(self.toolCalls) || self.outputReserve.toolCalls <= self.toolCalls",message="spec.budget.outputReserve.toolCalls must not exceed spec.budget.toolCalls"
// +kubebuilder:validation:XValidation:rule="!has(self.outputReserve) || !has(self.outputReserve.tokens) || (has(self.tokens) && self.outputReserve.tokens <= self.tokens)",message="spec.budget.outputReserve.tokens must not exceed spec.budget.tokens (and needs spec.budget.tokens)"
type Budget struct {
	// modelRequests is the total number of model requests the run may make,
	// reserve included. Unset: the tier's defaults.modelRequests, written by
	// the admission webhook; a run whose tier has none must set it.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ModelRequests int64 `json:"modelRequests,omitempty"`
	// toolCalls is the total number of tool calls the run may make, reserve
	// included. Unset: the tier's defaults.toolCalls, written by the
	// admission webhook; a run whose tier has none must set it (0 is a
	// value: no tool calls).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ToolCalls int64 `json:"toolCalls"`
	// tokens is the total number of model tokens the run may use, reserve
	// included. Unset: the tier's defaults.tokens, else tokens are not
	// budgeted (a policy or tier that caps tokens requires them).
	// +kubebuilder:validation:Minimum=1
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`
	// cost is the most the run's model requests may cost, reserve included,
	// in the currency its policy names (spec.currency), e.g. "5.00". Unset:
	// cost is not budgeted. A run with a cost needs prices on every model of
	// its policy.
	// +optional
	Cost *Money `json:"cost,omitempty"`
	// outputReserve is kept back for finalization, in the same units.
	// +optional
	OutputReserve OutputReserve `json:"outputReserve,omitzero"`
	// deadline is the run's wall-clock allowance, measured from status.startTime.
	// When it passes the run finalizes (DeadlineExceeded). Unset: the tier's
	// defaults.deadline, else 30m (lowered to the tier's cap), written by the
	// admission webhook.
	// +optional
	Deadline *metav1.Duration `json:"deadline,omitempty"`
	// finalizationGrace is how long finalization may take after the deadline;
	// at deadline + finalizationGrace the run is Terminated whatever the pod does.
	// +kubebuilder:default="2m"
	// +optional
	FinalizationGrace *metav1.Duration `json:"finalizationGrace,omitempty"`
}

// Gates are the limits that end an unproductive run. Each degrades before it
// ends the run: past degradeAtPercent of a limit the operator publishes a
// Degrade directive, past compressAtPercent a Compress directive, and at the
// limit the run finalizes from the reserve.
// +kubebuilder:validation:XValidation:rule="!has(self.degradeAtPercent) || !has(self.compressAtPercent) || self.degradeAtPercent <= self.compressAtPercent",message="spec.gates.degradeAtPercent must not exceed spec.gates.compressAtPercent"
type Gates struct {
	// maxSteps is the most agent-loop steps the run may take (StepLimit).
	// Unset: the tier's defaults.maxSteps, else 20 (lowered to the tier's
	// cap), written by the admission webhook.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxSteps int32 `json:"maxSteps,omitempty"`
	// sameCallLimit is how many times one tool call fingerprint (tool +
	// arguments + context) may repeat (RepeatedCall).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=3
	// +optional
	SameCallLimit int32 `json:"sameCallLimit,omitempty"`
	// noProgressLimit is how many steps may pass without progress (NoProgress).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=5
	// +optional
	NoProgressLimit int32 `json:"noProgressLimit,omitempty"`
	// degradeAtPercent is the share of any gate's limit at which the Degrade
	// directive is published.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=75
	// +optional
	DegradeAtPercent int32 `json:"degradeAtPercent,omitempty"`
	// compressAtPercent is the share of any gate's limit at which the Compress
	// directive is published.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=90
	// +optional
	CompressAtPercent int32 `json:"compressAtPercent,omitempty"`
}

// Recovery says how failed attempts are replaced.
type Recovery struct {
	// maxAttempts is the most attempts (pods) the run may use, the first
	// included. Unset: the tier's defaults.maxAttempts, else 3 (lowered to
	// the tier's cap), written by the admission webhook.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
	// backoff is the wait before a replacement attempt starts.
	// +kubebuilder:default="5s"
	// +optional
	Backoff *metav1.Duration `json:"backoff,omitempty"`
	// heartbeatInterval is how often the agent reports it is alive.
	// +kubebuilder:default="10s"
	// +optional
	HeartbeatInterval *metav1.Duration `json:"heartbeatInterval,omitempty"`
	// heartbeatTimeout is how long a running attempt may stay silent before it
	// is treated as failed.
	// +kubebuilder:default="60s"
	// +optional
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`
	// startTimeout is how long an attempt's pod may take to start running
	// (scheduling, image pull) before the attempt is treated as failed.
	// 0 turns the check off.
	// +kubebuilder:default="5m"
	// +optional
	StartTimeout *metav1.Duration `json:"startTimeout,omitempty"`
}

// EffectiveDeadline is deadline, or the built-in default when unset (a run
// admitted without the mutating webhook, which writes it).
func (b *Budget) EffectiveDeadline() time.Duration {
	if b == nil || b.Deadline == nil {
		return DefaultRunDeadline
	}
	return b.Deadline.Duration
}

// EffectiveMaxSteps is maxSteps, or the built-in default when unset.
func (g *Gates) EffectiveMaxSteps() int32 {
	if g == nil || g.MaxSteps <= 0 {
		return DefaultRunMaxSteps
	}
	return g.MaxSteps
}

// EffectiveMaxAttempts is maxAttempts, or the built-in default when unset.
func (r *Recovery) EffectiveMaxAttempts() int32 {
	if r == nil || r.MaxAttempts <= 0 {
		return DefaultRunMaxAttempts
	}
	return r.MaxAttempts
}

// ResearchRunSpec is one research task. Immutable after creation except stop
// and approvals.
// +kubebuilder:validation:XValidation:rule="self.sessionRef.name == oldSelf.sessionRef.name && self.goal == oldSelf.goal",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="has(self.tier) == has(oldSelf.tier) && (!has(self.tier) || self.tier == oldSelf.tier)",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="self.budget.?modelRequests.orValue(0) == oldSelf.budget.?modelRequests.orValue(0) && self.budget.?toolCalls.orValue(0) == oldSelf.budget.?toolCalls.orValue(0) && self.budget.?tokens.orValue(0) == oldSelf.budget.?tokens.orValue(0) && self.budget.?outputReserve.?modelRequests.orValue(0) == oldSelf.budget.?outputReserve.?modelRequests.orValue(0) && self.budget.?outputReserve.?toolCalls.orValue(0) == oldSelf.budget.?outputReserve.?toolCalls.orValue(0) && self.budget.?outputReserve.?tokens.orValue(0) == oldSelf.budget.?outputReserve.?tokens.orValue(0) && duration(self.budget.?deadline.orValue('0s')) == duration(oldSelf.budget.?deadline.orValue('0s')) && duration(self.budget.?finalizationGrace.orValue('0s')) == duration(oldSelf.budget.?finalizationGrace.orValue('0s'))",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="self.?gates.?maxSteps.orValue(0) == oldSelf.?gates.?maxSteps.orValue(0) && self.?gates.?sameCallLimit.orValue(0) == oldSelf.?gates.?sameCallLimit.orValue(0) && self.?gates.?noProgressLimit.orValue(0) == oldSelf.?gates.?noProgressLimit.orValue(0) && self.?gates.?degradeAtPercent.orValue(0) == oldSelf.?gates.?degradeAtPercent.orValue(0) && self.?gates.?compressAtPercent.orValue(0) == oldSelf.?gates.?compressAtPercent.orValue(0)",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="self.?recovery.?maxAttempts.orValue(0) == oldSelf.?recovery.?maxAttempts.orValue(0) && duration(self.?recovery.?backoff.orValue('0s')) == duration(oldSelf.?recovery.?backoff.orValue('0s')) && duration(self.?recovery.?heartbeatInterval.orValue('0s')) == duration(oldSelf.?recovery.?heartbeatInterval.orValue('0s')) && duration(self.?recovery.?heartbeatTimeout.orValue('0s')) == duration(oldSelf.?recovery.?heartbeatTimeout.orValue('0s')) && duration(self.?recovery.?startTimeout.orValue('0s')) == duration(oldSelf.?recovery.?startTimeout.orValue('0s'))",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="has(self.template) || has(self.harness)",message="spec.template is required unless spec.harness is set"
// +kubebuilder:validation:XValidation:rule="has(self.harness) == has(oldSelf.harness) && (!has(self.harness) || self.harness == oldSelf.harness)",message="spec is immutable after creation except spec.stop and spec.approvals"
// +kubebuilder:validation:XValidation:rule="has(self.parent) == has(oldSelf.parent) && (!has(self.parent) || self.parent == oldSelf.parent)",message="spec.parent is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.stop) || (has(self.stop) && (self.stop == oldSelf.stop || self.stop == 'Cancel'))",message="spec.stop cannot be removed once set, and may only change from Finalize to Cancel"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.approvals) || (has(self.approvals) && size(self.approvals) >= size(oldSelf.approvals) && self.approvals.slice(0, size(oldSelf.approvals)) == oldSelf.approvals)",message="spec.approvals is append-only: existing approvals cannot be changed, reordered or removed"
type ResearchRunSpec struct {
	// sessionRef names the Session (same namespace) the run executes in; runs of
	// one session execute one at a time in creation order.
	// +required
	SessionRef LocalObjectReference `json:"sessionRef"`
	// tier names the RuntimePolicy tier (spec.tiers) whose caps bound the
	// run and whose defaults fill what it leaves unset. Unset: the policy's
	// defaultTier; the admission webhook writes the tier it resolved here
	// when the run is created. Must be unset when the policy has no tiers.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +optional
	Tier string `json:"tier,omitempty"`
	// goal is the research task, handed to the agent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	// +required
	Goal string `json:"goal"`
	// template is the attempt pod. The operator hardens it to the restricted Pod
	// Security Standard where the template leaves a field unset, runs it as the
	// policy's runner service account, and tells it its run and attempt in env.
	// The schema is kept open here (a full PodTemplateSpec schema would make the
	// CRD too large for client-side apply); the admission webhook decodes it
	// strictly, rejects unknown fields, and keeps the template immutable by
	// semantic comparison (a CEL equality would refuse a Go client's harmless
	// re-serialisation, such as an added "resources: {}").
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Template corev1.PodTemplateSpec `json:"template"`
	// harness runs a coding agent CLI (Claude Code, Codex) as the agent:
	// the operator adds the template's agent container from it, so the
	// template needs no container of its own (it may still set pod fields,
	// sidecars and resources). Immutable.
	// +optional
	Harness *Harness `json:"harness,omitempty"`
	// budget is what the run may spend, with the output reserve. Its
	// fields may be left to the tier's defaults.
	// +kubebuilder:default={}
	// +optional
	Budget Budget `json:"budget"`
	// gates are the limits that end an unproductive run.
	// +kubebuilder:default={}
	// +optional
	Gates Gates `json:"gates,omitzero"`
	// recovery says how failed attempts are replaced.
	// +kubebuilder:default={}
	// +optional
	Recovery Recovery `json:"recovery,omitzero"`
	// stop asks the run to end: Cancel (at once, nothing more is spent) or
	// Finalize (wrap up from the output reserve). Can be set at any time; once
	// set it cannot be removed, only raised from Finalize to Cancel.
	// +optional
	Stop StopRequest `json:"stop,omitempty"`
	// approvals answer actions that need confirmation. Append-only; the
	// webhook stamps approver and time. Defaults to an empty list so that
	// `kubectl patch --type=json` can append with path /spec/approvals/-.
	// +kubebuilder:default={}
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`
	// parent makes the run a child run of another (docs/children.md): set
	// only by agentrun-gateway when a parent's attempt asks for the child.
	// +optional
	Parent *ParentRef `json:"parent,omitempty"`
}

// AttemptLedger is what one attempt used, as last reported. The run's usage is
// the sum over attempts, so a retried attempt never double-counts and a
// superseded attempt's real usage is still counted.
type AttemptLedger struct {
	// attempt number, from 1.
	// +required
	Attempt int32 `json:"attempt"`
	// used is the attempt's monotonic usage counters.
	// +optional
	Used Usage `json:"used,omitzero"`
	// steps is the attempt's step counter.
	// +optional
	Steps int64 `json:"steps,omitempty"`
}

// BudgetStatus is the run's budget ledger.
type BudgetStatus struct {
	// used is the sum over attempts of their usage counters.
	// +optional
	Used Usage `json:"used,omitzero"`
	// remaining is budget minus used (the reserve included).
	// +optional
	Remaining Usage `json:"remaining,omitzero"`
	// granted is the allowance currently granted to the attempt (RunAttempt
	// spec.grant), in absolute counters.
	// +optional
	Granted Usage `json:"granted,omitzero"`
}

// GateStatus shows how close the run is to each gate.
type GateStatus struct {
	// steps taken over all attempts.
	// +optional
	Steps int64 `json:"steps,omitempty"`
	// stepsWithoutProgress since the last progress.
	// +optional
	StepsWithoutProgress int64 `json:"stepsWithoutProgress,omitempty"`
	// maxSameCall is the highest repeat count of one call fingerprint.
	// +optional
	MaxSameCall int64 `json:"maxSameCall,omitempty"`
	// localFaults counts faults handled locally (they change no phase).
	// +optional
	LocalFaults int64 `json:"localFaults,omitempty"`
	// directives currently published on the attempt.
	// +listType=atomic
	// +optional
	Directives []DirectiveType `json:"directives,omitempty"`
}

// FinalizationStatus is how a run entered Finalizing. It is set once, with the
// phase, and kept once the run is Terminated: later passes and the final
// message tell the finalization from it, never from status.message.
type FinalizationStatus struct {
	// reason is why the run finalizes. It is status.reason while the run is
	// Finalizing, and stays when a cancel or a violation ends the finalization
	// with another status.reason.
	// +required
	Reason Reason `json:"reason"`
	// cause is the sentence with the numbers behind reason, e.g. "working
	// budget exhausted at 40/40 model requests".
	// +kubebuilder:validation:MaxLength=2048
	// +required
	Cause string `json:"cause"`
	// reserve is what the finalization was given beyond the attempt's usage
	// when it began: the output reserve, or what was left of it.
	// +optional
	Reserve Usage `json:"reserve,omitzero"`
}

// ResearchRunStatus is written only by the operator (the termination owner).
// The API server refuses a backwards transition. The rules sit here, on the
// status, not on the whole object, so a write evaluates them against the
// status alone (a root rule only keeps the status from being removed).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || oldSelf.phase != 'Terminated' || (has(self.phase) && self.phase == 'Terminated')",message="status.phase: Terminated is absorbing and cannot change"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || oldSelf.phase != 'Finalizing' || (has(self.phase) && (self.phase == 'Finalizing' || self.phase == 'Terminated'))",message="status.phase: Finalizing is one-way and may only move to Terminated"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || oldSelf.phase != 'Terminated' || (has(self.reason) == has(oldSelf.reason) && (!has(oldSelf.reason) || self.reason == oldSelf.reason))",message="status.reason cannot change once Terminated"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || oldSelf.phase != 'Terminated' || (has(self.settlement) == has(oldSelf.settlement) && (!has(oldSelf.settlement) || self.settlement == oldSelf.settlement))",message="status.settlement cannot change once Terminated"
type ResearchRunStatus struct {
	// observedGeneration is the spec generation this status describes; -1
	// (the API's default) until the operator first writes the status.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// tier is the RuntimePolicy tier the run was admitted under (spec.tier);
	// empty when its policy has no tiers.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Tier string `json:"tier,omitempty"`
	// phase is where the run is. Terminated is absorbing; Finalizing is one-way.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// reason says why the run is finalizing or why it ended. Final once Terminated.
	// +optional
	Reason Reason `json:"reason,omitempty"`
	// settlement says what was durably delivered, as the attempt persisted it.
	// Final once Terminated.
	// +optional
	Settlement Settlement `json:"settlement,omitempty"`
	// message is one readable sentence with the numbers behind the phase.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Message string `json:"message,omitempty"`
	// queuePosition is the run's place in its session's queue while Queued (1 = next).
	// +optional
	QueuePosition int32 `json:"queuePosition,omitempty"`
	// attempt is the current attempt number (RunAttempt <run>-<attempt>).
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// steps taken over all attempts.
	// +optional
	Steps int64 `json:"steps,omitempty"`
	// queuedTime is when the run entered its session's queue.
	// +optional
	QueuedTime *metav1.Time `json:"queuedTime,omitempty"`
	// startTime is when the run first left the queue; the deadline counts from it.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// finalizingTime is when the run entered Finalizing.
	// +optional
	FinalizingTime *metav1.Time `json:"finalizingTime,omitempty"`
	// finalization is how the run entered Finalizing; unset if it never did.
	// +optional
	Finalization *FinalizationStatus `json:"finalization,omitempty"`
	// completionTime is when the run became Terminated.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// budget is the ledger: used, remaining, granted.
	// +optional
	Budget BudgetStatus `json:"budget,omitzero"`
	// ledger is each attempt's last reported usage (at most maxAttempts plus
	// one finalize-only attempt).
	// +kubebuilder:validation:MaxItems=11
	// +listType=map
	// +listMapKey=attempt
	// +optional
	Ledger []AttemptLedger `json:"ledger,omitempty"`
	// gates shows how close the run is to each gate.
	// +optional
	Gates GateStatus `json:"gates,omitzero"`
	// pendingApprovals are the current attempt's tool calls waiting for a
	// decision (spec.approvals); the AwaitingApproval condition is True while
	// there is one.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=actionID
	// +optional
	PendingApprovals []ApprovalRequest `json:"pendingApprovals,omitempty"`
	// securityPosture mirrors the current attempt's: set while the run is
	// held to its policy's stricter posture because a Security interceptor
	// fails (condition SecurityDegraded).
	// +optional
	SecurityPosture *SecurityPosture `json:"securityPosture,omitempty"`
	// observedApprovals is how many entries of spec.approvals (append-only)
	// the operator has judged: each later entry whose action no call waits
	// on gets one ApprovalChangedNothing warning.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedApprovals int32 `json:"observedApprovals,omitempty"`
	// conditions: Ready, Reconciling (True until the run is Terminated:
	// kstatus InProgress), Stalled (True for an end kstatus reads as
	// Failed), Succeeded, Finalizing, Recovering, AwaitingApproval.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rr,categories=agentrun
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionRef.name`
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.spec.tier`
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parent.name`
// +kubebuilder:printcolumn:name="Root",type=string,JSONPath=`.spec.parent.root`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Settlement",type=string,JSONPath=`.status.settlement`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.status.attempt`
// +kubebuilder:printcolumn:name="Steps",type=integer,JSONPath=`.status.steps`
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.budget.used.cost`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase != 'Terminated' || has(self.status)",message="status.phase: Terminated is absorbing and cannot change"

// ResearchRun is one research task for an agent: a goal, a pod template, a
// budget with an output reserve, gates, recovery, and the user's stop request
// and approvals. The operator alone decides its phase from the facts its
// attempts report.
type ResearchRun struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the research task.
	// +required
	Spec ResearchRunSpec `json:"spec"`

	// status is written only by the operator. Until its first write it
	// reads observedGeneration -1, so kstatus sees the run as InProgress,
	// not as Current.
	// +kubebuilder:default={"observedGeneration":-1}
	// +optional
	Status ResearchRunStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// ResearchRunList contains a list of ResearchRun
type ResearchRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []ResearchRun `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &ResearchRun{}, &ResearchRunList{})
		return nil
	})
}
