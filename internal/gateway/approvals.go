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

package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// maxSummary is the longest one-line summary of a call's arguments (events
// and conditions); approvers read the arguments themselves.
const maxSummary = 256

// shownArguments is what an approver reads of a call's arguments: the
// canonical JSON, redacted as the redact interceptor redacts whether or not
// the policy's chain has one (approvers never read a secret the agent
// passed), in full up to v1alpha1.MaxApprovalArguments bytes, with its
// length and SHA-256.
type shownArguments struct {
	summary   string
	text      string
	bytes     int64
	sha256    string
	truncated bool
}

// showArguments is args as an approver reads them.
func showArguments(args map[string]any) shownArguments {
	raw, _ := gatewayapi.CanonicalJSON(chain.RedactArguments(args))
	full := chain.RedactText(string(raw))
	sum := sha256.Sum256([]byte(full))
	return shownArguments{
		summary:   textutil.Truncate(full, maxSummary),
		text:      textutil.Cut(full, v1alpha1.MaxApprovalArguments),
		bytes:     int64(len(full)),
		sha256:    hex.EncodeToString(sum[:]),
		truncated: len(full) > v1alpha1.MaxApprovalArguments,
	}
}

// approvalWindow is the span of one waiting request, [from, to]: only a
// decision stamped within it answers the request. Stamps are whole seconds,
// so from is taken at the start of its second.
type approvalWindow struct{ from, to time.Time }

func (w approvalWindow) holds(t time.Time) bool {
	return !t.Before(w.from.Truncate(time.Second)) && !t.After(w.to)
}

// approvalAnswer is the decision that answers a waiting call.
type approvalAnswer struct {
	// index is the decision's position in spec.approvals.
	index    int
	decision v1alpha1.Approval
	// spend is true when admitting the call uses the approval up (records
	// index in status.usedApprovals); false for a Deny and for a Standing
	// approval this attempt already used.
	spend bool
}

// answerApproval finds the decision that answers a call of actionID waiting
// in window w, whose shown arguments are args, given the attempt's used
// approvals (positions in approvals):
//   - the latest decision for actionID, if it is a Standing Approve this
//     attempt already used, admits the call again;
//   - else the latest decision for actionID stamped within w that is not
//     used answers: a Deny refuses; an Approve admits and is spent, unless
//     it names other arguments (argumentsSHA256), or the arguments were too
//     long to be shown in full and it names none — then it is passed over.
//
// A decision without a stamp answers nothing. ok is false when nothing
// answers yet.
func answerApproval(approvals []v1alpha1.Approval, used []int32, actionID string, w approvalWindow, args shownArguments) (approvalAnswer, bool) {
	last := -1
	for i, ap := range slices.Backward(approvals) {
		if ap.ActionID == actionID {
			last = i
			break
		}
	}
	if last < 0 {
		return approvalAnswer{}, false
	}
	isUsed := func(i int) bool { return slices.Contains(used, int32(i)) }
	if ap := approvals[last]; ap.Decision == v1alpha1.DecisionApprove && ap.Scope == v1alpha1.ApprovalScopeStanding && isUsed(last) {
		return approvalAnswer{index: last, decision: ap}, true
	}
	for i := last; i >= 0; i-- {
		ap := approvals[i]
		if ap.ActionID != actionID || ap.Time == nil || !w.holds(ap.Time.Time) || isUsed(i) {
			continue
		}
		if ap.Decision != v1alpha1.DecisionApprove {
			return approvalAnswer{index: i, decision: ap}, true
		}
		if (ap.ArgumentsSHA256 != "" && ap.ArgumentsSHA256 != args.sha256) || (args.truncated && ap.ArgumentsSHA256 == "") {
			continue
		}
		return approvalAnswer{index: i, decision: ap, spend: true}, true
	}
	return approvalAnswer{}, false
}
