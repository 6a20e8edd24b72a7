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

package web

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunLister lists the runs of a namespace for the runs view. The operator's
// one reads its ResearchRun cache.
type RunLister interface {
	List(ctx context.Context, namespace string) ([]RunSummary, error)
}

// RunListerFunc adapts a function to RunLister.
type RunListerFunc func(ctx context.Context, namespace string) ([]RunSummary, error)

// List calls f.
func (f RunListerFunc) List(ctx context.Context, namespace string) ([]RunSummary, error) {
	return f(ctx, namespace)
}

// RunList is the list endpoint's answer.
type RunList struct {
	Items []RunSummary `json:"items"`
}

// RunSummary is one row of the runs view: a ResearchRun's status, reduced.
type RunSummary struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Phase, Reason and Message are status.phase, .reason and .message.
	Phase   string `json:"phase"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Session is spec.sessionRef.name.
	Session string `json:"session"`
	// Created is metadata.creationTimestamp (RFC 3339).
	Created metav1.Time `json:"created,omitzero"`
	// Steps is status.steps.
	Steps int64 `json:"steps"`
	// Budget is the run's usage (status.budget.used) of its budget
	// (spec.budget).
	Budget Budget `json:"budget"`
	// PendingApprovals is status.pendingApprovals (never null on the wire).
	PendingApprovals []PendingApproval `json:"pendingApprovals"`
	// LastSeq is the run stream's last seq, when known.
	LastSeq uint64 `json:"lastSeq,omitempty"`
}

// Budget is a run's used and granted counters.
type Budget struct {
	ModelRequests Count `json:"modelRequests"`
	ToolCalls     Count `json:"toolCalls"`
	Tokens        Count `json:"tokens"`
}

// Count is one budget counter: used of granted.
type Count struct {
	Used    int64 `json:"used"`
	Granted int64 `json:"granted"`
}

// PendingApproval is a tool call waiting for a decision.
type PendingApproval struct {
	// Action is the action id an Approval names (spec.approvals[].actionID).
	Action  string `json:"action"`
	Tool    string `json:"tool"`
	Summary string `json:"summary"`
}
