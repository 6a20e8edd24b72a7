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

// This file is the one home of the reasons the operator writes: condition
// reasons and event reasons (with the events' actions). Each is a PascalCase
// word naming a cause. The run's own Reason values (common_types.go) and its
// Phase values are condition reasons too: Ready, Succeeded, Stalled and
// Finalizing carry the run's reason once it finalizes or ends, Ready
// carries the phase while the run waits (Pending, Queued, Recovering,
// Finalizing), and Reconciling carries the phase (or Stopping) until the run
// is Terminated.

// Condition reasons on a ResearchRun.
const (
	// ConditionReasonStopping (Ready=False, Reconciling=True, and Finalizing
	// or Recovering False when they were True): the run has decided to end
	// and waits for its pod to stop; status.reason says why. Persisted, this reason is
	// also what keeps later passes on that decision (the Stopping latch).
	ConditionReasonStopping = "Stopping"
	// ConditionReasonAttemptFailed (Recovering=True): the current attempt
	// failed; its pod is being stopped or the backoff runs. The condition's
	// lastTransitionTime is when the failure was seen; the backoff counts
	// from it.
	ConditionReasonAttemptFailed = "AttemptFailed"
	// ConditionReasonStartingAttempt (Recovering=True): a replacement attempt
	// was started and its pod is not running yet.
	ConditionReasonStartingAttempt = "StartingAttempt"
	// ConditionReasonRecovered (Recovering=False): the replacement attempt runs.
	ConditionReasonRecovered = "Recovered"
	// ConditionReasonRunning (Ready=True, Reconciling=True): an attempt is working.
	ConditionReasonRunning = "Running"
	// ConditionReasonTerminated (Finalizing=False, Recovering=False or
	// Reconciling=False): the run is Terminated, so finalization, recovery
	// or the run itself is over.
	ConditionReasonTerminated = "Terminated"
)

// Condition reasons on a Session.
const (
	// ConditionReasonPolicyFound (Ready=True; Reconciling and Stalled False
	// when they were True): the RuntimePolicy named by spec.policyRef exists,
	// is valid and governs the session.
	ConditionReasonPolicyFound = "PolicyFound"
	// ConditionReasonPolicyNotFound (Ready=False, Reconciling=True): the
	// RuntimePolicy named by spec.policyRef does not exist; the session's
	// runs wait in Pending.
	ConditionReasonPolicyNotFound = "PolicyNotFound"
	// ConditionReasonPolicyNotResolved (Ready=False, Reconciling=True): the
	// RuntimePolicy exists but its Valid condition is not yet written for its
	// current generation.
	ConditionReasonPolicyNotResolved = "PolicyNotResolved"
	// ConditionReasonPolicyInvalid (Ready=False, Stalled=True): the
	// RuntimePolicy is Valid=False; no run of the session leaves Pending until
	// the policy is fixed.
	ConditionReasonPolicyInvalid = "PolicyInvalid"
)

// Condition reasons on a RuntimePolicy.
const (
	// ConditionReasonResolved (Valid=True, Ready=True; Stalled=False when it
	// was True): the chain and catalogue passed validation and
	// status.resolvedChain is the chain in its applied order.
	ConditionReasonResolved = "Resolved"
	// ConditionReasonInvalid (Valid=False, Ready=False, Stalled=True): the
	// chain or catalogue broke a rule (the message lists them);
	// status.resolvedChain is empty, and no new run starts on the policy.
	ConditionReasonInvalid = "Invalid"
)

// Event reasons on a ResearchRun: one event per transition, recorded right
// after the status write that makes it true.
const (
	// EventReasonQueued (Normal): the run waits in its session's queue.
	EventReasonQueued = "Queued"
	// EventReasonRunning (Normal): an attempt works.
	EventReasonRunning = "Running"
	// EventReasonRecovering (Warning): the current attempt failed and is
	// being replaced.
	EventReasonRecovering = "Recovering"
	// EventReasonFinalizing (Normal): the run finalizes from its output
	// reserve; the message leads with the run's reason.
	EventReasonFinalizing = "Finalizing"
	// EventReasonStopping (Normal for Completed, else Warning): the run
	// decided to end and its pod is being stopped.
	EventReasonStopping = "Stopping"
	// EventReasonTerminated (Normal for Completed, else Warning): the run
	// ended; the message gives reason, settlement and numbers.
	EventReasonTerminated = "Terminated"
	// EventReasonAttemptStarted (Normal): a replacement or finalize-only
	// attempt was started.
	EventReasonAttemptStarted = "AttemptStarted"
	// EventReasonApprovalRequested (Normal): a tool call of the run waits for
	// a decision; the message names the action id, the tool, its risk and the
	// redacted arguments, and how to approve it.
	EventReasonApprovalRequested = "ApprovalRequested"
	// EventReasonApprovalChangedNothing (Warning): a decision arrived for an
	// action that no call waits on any more (already dispatched, refused or
	// expired): it changes nothing.
	EventReasonApprovalChangedNothing = "ApprovalChangedNothing"
)

// Reasons of SecurityDegraded (condition and events).
const (
	// EventReasonSecurityDegraded (Warning) and condition reason
	// (SecurityDegraded=True): a Security interceptor fails; the run's
	// writes need an approval (ConfirmAll) or are refused (DenyWrites).
	EventReasonSecurityDegraded = "SecurityDegraded"
	// EventReasonSecurityRecovered (Normal) and condition reason
	// (SecurityDegraded=False): the run is back to its normal posture.
	EventReasonSecurityRecovered = "SecurityRecovered"
)

// Condition reasons of AwaitingApproval.
const (
	// ConditionReasonApprovalPending: at least one call waits for a decision.
	ConditionReasonApprovalPending = "ApprovalPending"
	// ConditionReasonNoPendingApprovals: no call waits.
	ConditionReasonNoPendingApprovals = "NoPendingApprovals"
)

// Event reasons on a Session.
const (
	// EventReasonPermissionModeChanged (Normal): the session's permission
	// mode was switched; the message says by whom, from what, to what and why.
	EventReasonPermissionModeChanged = "PermissionModeChanged"
)

// Event reasons on a ResearchRun about what its attempts run in: recorded
// when the operator finds the thing, not on a transition of the run.
const (
	// EventReasonForeignPodReplaced (Warning): a pod with the attempt's name
	// and the run as its controller exists that the operator did not create
	// (it holds no record of the UID its create returned); it is deleted,
	// never recorded as the attempt's pod, and the attempt's pod is created
	// once it is gone.
	EventReasonForeignPodReplaced = "ForeignPodReplaced"
	// EventReasonForeignPodInTheWay (Warning): a pod with the attempt's name
	// exists that the run does not control; the operator does not delete it,
	// and the attempt does not start until it is removed.
	EventReasonForeignPodInTheWay = "ForeignPodInTheWay"
	// EventReasonExtraEgressPolicy (Warning): a NetworkPolicy other than
	// agentrun-attempt-egress selects the run's attempt pods and allows them
	// egress (NetworkPolicies add up, so it widens what the pods may reach);
	// the message names it.
	EventReasonExtraEgressPolicy = "ExtraEgressPolicy"
)

// Event actions: what the operator did when it recorded the event.
const (
	// EventActionDecide: the termination owner decided a run's next phase.
	EventActionDecide = "Decide"
	// EventActionSwitchMode: the Session controller recorded a mode switch.
	EventActionSwitchMode = "SwitchMode"
	// EventActionCreatePod: the operator was creating an attempt's pod.
	EventActionCreatePod = "CreatePod"
)
