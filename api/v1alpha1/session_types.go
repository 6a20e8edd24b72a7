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

// Session annotations.
const (
	// AnnotationModeChange is stamped by the Session admission webhook on every
	// mode switch: a JSON ModeChange (who, from, to, why, when) taken from the
	// request's user info, never from the body. The operator moves it into
	// status.modeHistory, adding what the session was doing (its active run,
	// that run's phase and steps, the queued runs).
	AnnotationModeChange = "agentrun.dev/mode-change"
	// SessionFinalizer lets a deleted Session end its runs in order before
	// it goes.
	SessionFinalizer = "agentrun.dev/session-runs"
	// AnnotationStopCause, on a ResearchRun, explains a spec.stop the
	// operator set (e.g. the session was deleted); the termination owner puts
	// it in the run's message, and `kubectl agentrun why` shows it.
	AnnotationStopCause = "agentrun.dev/stop-cause"
)

// SessionQueue overrides the policy's queue defaults, within its bounds.
type SessionQueue struct {
	// limit is how many runs may wait behind the active one; a run beyond it
	// ends at once as Terminated/QueueFull. Defaults to the policy's
	// queue.defaultLimit; may not exceed its queue.maxLimit.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Limit *int32 `json:"limit,omitempty"`
	// timeout is how long a run may wait; past it the run ends as
	// Terminated/QueueTimeout. Defaults to the policy's queue.defaultTimeout;
	// may not exceed its queue.maxTimeout.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// SessionSpec is a conversation: runs of one session execute one at a time.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.mode) || !has(self.mode) || self.mode == oldSelf.mode || (has(self.modeChangeReason) && size(self.modeChangeReason) > 0 && (!has(oldSelf.modeChangeReason) || self.modeChangeReason != oldSelf.modeChangeReason))",message="spec.modeChangeReason: a permission-mode switch requires a new, non-empty reason"
type SessionSpec struct {
	// policyRef names the RuntimePolicy (same namespace) that governs this session.
	// +required
	PolicyRef LocalObjectReference `json:"policyRef"`
	// mode is the session's current permission mode. Defaults to the policy's
	// defaultMode; never above its maxMode. Each switch must come with a new
	// modeChangeReason and is audited in status.modeHistory.
	// +optional
	Mode PermissionMode `json:"mode,omitempty"`
	// modeChangeReason says why the mode was last switched. Required, and must
	// change, with every switch of spec.mode.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ModeChangeReason string `json:"modeChangeReason,omitempty"`
	// queue overrides the policy's queue limit and timeout for this session.
	// +optional
	Queue SessionQueue `json:"queue,omitzero"`
}

// ModeChange is one audited permission-mode switch.
type ModeChange struct {
	// from is the mode before the switch.
	// +optional
	From PermissionMode `json:"from,omitempty"`
	// to is the mode after the switch.
	// +required
	To PermissionMode `json:"to"`
	// by is the user who made the switch, from the request's user info.
	// +required
	By string `json:"by"`
	// reason is spec.modeChangeReason at the switch.
	// +optional
	Reason string `json:"reason,omitempty"`
	// time the switch was admitted.
	// +required
	Time metav1.Time `json:"time"`

	// What the session was doing when the switch was made, as the operator
	// saw it (from its cache) when it recorded the switch, moments after
	// admission. Written by the operator alone, never taken from the stamp.

	// activeRun is the run that held the session (the run in an active
	// phase); empty when no run held it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ActiveRun string `json:"activeRun,omitempty"`
	// activeRunPhase is activeRun's phase; empty when there is no activeRun.
	// +optional
	ActiveRunPhase Phase `json:"activeRunPhase,omitempty"`
	// activeRunSteps is the steps activeRun had taken (its status.steps).
	// +kubebuilder:validation:Minimum=0
	// +optional
	ActiveRunSteps int64 `json:"activeRunSteps,omitempty"`
	// queuedRuns are the first runs waiting behind activeRun, in queue order
	// (at most 10; moreQueuedRuns counts the rest).
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	QueuedRuns []string `json:"queuedRuns,omitempty"`
	// moreQueuedRuns is how many more runs were waiting beyond queuedRuns.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MoreQueuedRuns int32 `json:"moreQueuedRuns,omitempty"`
}

// PhaseCounts counts a session's runs by phase.
type PhaseCounts struct {
	// queued runs (Pending or Queued).
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// running runs (Running or Recovering).
	// +optional
	Running int32 `json:"running,omitempty"`
	// finalizing runs.
	// +optional
	Finalizing int32 `json:"finalizing,omitempty"`
	// terminated runs.
	// +optional
	Terminated int32 `json:"terminated,omitempty"`
}

// SessionStatus is the operator's view of a session.
type SessionStatus struct {
	// observedGeneration is the spec generation this status describes; -1
	// (the API's default) until the operator first writes the status.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// mode is the effective permission mode (spec.mode, or the policy's default).
	// +optional
	Mode PermissionMode `json:"mode,omitempty"`
	// activeRun is the run that holds the session: the one in an active
	// phase (Running, Recovering, Finalizing). A summary: the operator starts
	// a run by writing the run's own status, and writes this once the
	// session's runs have been quiet for a second (at most 5s after their
	// first change), so it may trail the runs by that much.
	// +optional
	ActiveRun string `json:"activeRun,omitempty"`
	// queuedRuns are the first waiting runs in order (at most 20; see queuedCount).
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	QueuedRuns []string `json:"queuedRuns,omitempty"`
	// queuedCount is the number of waiting runs.
	// +optional
	QueuedCount int32 `json:"queuedCount,omitempty"`
	// runs counts the session's runs by phase.
	// +optional
	Runs PhaseCounts `json:"runs,omitzero"`
	// modeHistory is the audit trail of permission-mode switches, newest last
	// (the last 20).
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	ModeHistory []ModeChange `json:"modeHistory,omitempty"`
	// conditions: Ready says whether the session's policy exists and is
	// valid; Reconciling is True while the policy is missing or not yet
	// resolved (kstatus: InProgress), Stalled while it is invalid (Failed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sess,categories=agentrun
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.activeRun`
// +kubebuilder:printcolumn:name="Queued",type=integer,JSONPath=`.status.queuedCount`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyRef.name`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Session is a conversation with an agent: its ResearchRuns execute one at a
// time in creation order behind a bounded, timed queue, under a permission mode
// whose every switch is audited.
type Session struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is a standard object metadata
	// +optional
	metav1.ObjectMeta `json:"metadata,omitzero"`

	// spec is the session's desired state.
	// +required
	Spec SessionSpec `json:"spec"`

	// status is written by the operator. Until its first write it reads
	// observedGeneration -1, so kstatus sees the session as InProgress, not
	// as Current.
	// +kubebuilder:default={"observedGeneration":-1}
	// +optional
	Status SessionStatus `json:"status,omitzero"`
}

// +kubebuilder:object:root=true

// SessionList contains a list of Session
type SessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitzero"`
	Items           []Session `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &Session{}, &SessionList{})
		return nil
	})
}
