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

package lifecycle

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// maxPendingApprovals is the API's bound on status.pendingApprovals (and on
// the attempt's awaitingApproval).
const maxPendingApprovals = 16

// maxEventMessage is the bound on an event's note (events.k8s.io/v1).
const maxEventMessage = 1024

// approvals mirrors the calls of the working attempt that wait for a
// decision on the run (status.pendingApprovals, each with its attempt
// number), sets the AwaitingApproval condition once the run has started,
// and judges the entries of spec.approvals that arrived since the last pass
// (status.observedApprovals). It runs after the phase is decided and before
// the events are built, which report what it found.
func (e *enactment) approvals() {
	st := &e.st
	st.PendingApprovals = e.pendingApprovals()
	if st.StartTime != nil || e.condition(v1alpha1.ConditionAwaitingApproval) != nil {
		if len(st.PendingApprovals) > 0 {
			e.setCondition(v1alpha1.ConditionAwaitingApproval, metav1.ConditionTrue, v1alpha1.ConditionReasonApprovalPending,
				e.f.awaitingMessage(st.PendingApprovals))
		} else {
			e.setCondition(v1alpha1.ConditionAwaitingApproval, metav1.ConditionFalse, v1alpha1.ConditionReasonNoPendingApprovals,
				"no tool call waits for a decision")
		}
	}
	approvals := e.f.in.Spec.Approvals
	seen := min(max(int(e.f.in.Status.ObservedApprovals), 0), len(approvals))
	e.lateApprovals = approvals[seen:]
	st.ObservedApprovals = int32(len(approvals))
}

// pendingApprovals is the working attempt's awaitingApproval, each entry
// with its attempt number. Nothing is pending while the run has not started
// or is ending, or while its current attempt has failed: a call of a failed
// attempt is never dispatched, whatever the decision.
func (e *enactment) pendingApprovals() []v1alpha1.ApprovalRequest {
	st := &e.st
	if !st.Phase.IsActive() || e.stopping || (e.v.failed && !e.v.newAttempt) || !e.cur.exists {
		return nil
	}
	reqs := e.cur.facts.Status.AwaitingApproval
	if len(reqs) == 0 {
		return nil
	}
	out := make([]v1alpha1.ApprovalRequest, 0, min(len(reqs), maxPendingApprovals))
	for _, r := range reqs[:min(len(reqs), maxPendingApprovals)] {
		c := *r.DeepCopy()
		c.Attempt = e.cur.n
		out = append(out, c)
	}
	return out
}

// approvalEvents are one ApprovalRequested event per action that is pending
// now and was not before, and one ApprovalChangedNothing warning per new
// entry of spec.approvals for an action no call waits on.
func (e *enactment) approvalEvents() []Event {
	var evs []Event
	before := e.f.in.Status.PendingApprovals
	for _, r := range e.st.PendingApprovals {
		if pendingIn(before, r.ActionID, r.Attempt) {
			continue
		}
		evs = append(evs, Event{corev1.EventTypeNormal, v1alpha1.EventReasonApprovalRequested,
			textutil.Truncate(e.f.requestedMessage(r), maxEventMessage)})
	}
	for _, a := range e.lateApprovals {
		if pendingIn(e.st.PendingApprovals, a.ActionID, 0) {
			continue
		}
		evs = append(evs, Event{corev1.EventTypeWarning, v1alpha1.EventReasonApprovalChangedNothing,
			textutil.Truncate(e.changedNothingMessage(a), maxEventMessage)})
	}
	return evs
}

// pendingIn reports whether reqs holds actionID (of attempt n, unless n is 0).
func pendingIn(reqs []v1alpha1.ApprovalRequest, actionID string, n int32) bool {
	for _, r := range reqs {
		if r.ActionID == actionID && (n == 0 || r.Attempt == n) {
			return true
		}
	}
	return false
}

// approveCommand is how a person approves the call r of this run: an
// approval of arguments too long to be shown in full names their hash, or
// the gateway admits nothing with it.
func (f *facts) approveCommand(r v1alpha1.ApprovalRequest) string {
	hash := ""
	if r.ArgumentsTruncated {
		hash = fmt.Sprintf(`,"argumentsSHA256":%q`, r.ArgumentsSHA256)
	}
	return fmt.Sprintf(`kubectl patch researchrun %s --type=json -p '[{"op":"add","path":"/spec/approvals/-","value":{"actionID":%q,"decision":"Approve"%s}}]'`,
		f.in.Name, r.ActionID, hash)
}

// describeRequest says what a call is: its tool and risk, as far as known.
func describeRequest(r v1alpha1.ApprovalRequest) string {
	var parts []string
	if r.Tool != "" {
		parts = append(parts, "tool "+r.Tool)
	}
	if r.Risk != "" {
		parts = append(parts, "risk "+string(r.Risk))
	}
	return strings.Join(parts, ", ")
}

// described is " (what)" for a call whose tool or risk is known, else "".
func described(r v1alpha1.ApprovalRequest) string {
	if d := describeRequest(r); d != "" {
		return " (" + d + ")"
	}
	return ""
}

// awaitingMessage is the AwaitingApproval condition's message: the actions
// that wait and how to approve (or deny) one.
func (f *facts) awaitingMessage(reqs []v1alpha1.ApprovalRequest) string {
	parts := make([]string, 0, len(reqs))
	for _, r := range reqs {
		parts = append(parts, r.ActionID+described(r))
	}
	head := fmt.Sprintf("1 call of attempt %d waits for a decision", reqs[0].Attempt)
	if len(reqs) > 1 {
		head = fmt.Sprintf("%d calls of attempt %d wait for a decision", len(reqs), reqs[0].Attempt)
	}
	return fmt.Sprintf(`%s: %s; approve with: %s ("decision":"Deny" refuses it)`,
		head, strings.Join(parts, ", "), f.approveCommand(reqs[0]))
}

// requestedMessage is the ApprovalRequested event's message.
func (f *facts) requestedMessage(r v1alpha1.ApprovalRequest) string {
	msg := fmt.Sprintf("action %s of attempt %d waits for a decision%s", r.ActionID, r.Attempt, described(r))
	if r.Summary != "" {
		msg += ": " + textutil.Truncate(r.Summary, 256)
	}
	switch {
	case r.ArgumentsTruncated:
		msg += fmt.Sprintf(" (its %d bytes of arguments are too long to be shown in full; approve only after reading them where they were made, naming their SHA-256 %s)",
			r.ArgumentsBytes, r.ArgumentsSHA256)
	case r.ArgumentsBytes > int64(len(r.Summary)):
		msg += fmt.Sprintf(" (cut: read all %d bytes of arguments with kubectl agentrun why %s before deciding)", r.ArgumentsBytes, f.in.Name)
	}
	if r.ExpiresAt != nil {
		msg += "; refused if not decided by " + r.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return msg + "; approve with: " + f.approveCommand(r)
}

// changedNothingMessage is the ApprovalChangedNothing warning's message.
func (e *enactment) changedNothingMessage(a v1alpha1.Approval) string {
	who := ""
	if a.Approver != "" {
		who = " by " + a.Approver
	}
	where := "this run"
	if e.st.Phase.IsActive() && e.cur.n > 0 {
		where = fmt.Sprintf("attempt %d", e.cur.n)
	}
	return fmt.Sprintf("%s of action %s%s changes nothing: no call of %s waits on it (already dispatched, refused or expired, or never asked)",
		a.Decision, a.ActionID, who, where)
}
