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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestAnswerApproval(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 400_000_000, time.UTC) // mid-second
	w := approvalWindow{from: t0, to: t0.Add(time.Minute)}
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Truncate(time.Second).Add(d)} }
	approve := func(d time.Duration) v1alpha1.Approval {
		return v1alpha1.Approval{ActionID: "a", Decision: v1alpha1.DecisionApprove, Time: at(d)}
	}
	deny := func(d time.Duration) v1alpha1.Approval {
		return v1alpha1.Approval{ActionID: "a", Decision: v1alpha1.DecisionDeny, Time: at(d)}
	}
	standing := func(d time.Duration) v1alpha1.Approval {
		a := approve(d)
		a.Scope = v1alpha1.ApprovalScopeStanding
		return a
	}
	withHash := func(a v1alpha1.Approval, h string) v1alpha1.Approval { a.ArgumentsSHA256 = h; return a }
	other := v1alpha1.Approval{ActionID: "b", Decision: v1alpha1.DecisionApprove, Time: at(time.Second)}
	unstamped := v1alpha1.Approval{ActionID: "a", Decision: v1alpha1.DecisionApprove}
	short := shownArguments{sha256: strings.Repeat("1", 64)}
	long := shownArguments{sha256: strings.Repeat("2", 64), truncated: true}
	none := approvalAnswer{index: -1}
	for name, tc := range map[string]struct {
		approvals []v1alpha1.Approval
		used      []int32
		args      shownArguments
		want      approvalAnswer // index -1: nothing answers
	}{
		"none":                                {want: none},
		"another action":                      {approvals: []v1alpha1.Approval{other}, want: none},
		"unstamped answers nothing":           {approvals: []v1alpha1.Approval{unstamped}, want: none},
		"in the window, spent":                {approvals: []v1alpha1.Approval{approve(time.Second)}, want: approvalAnswer{index: 0, spend: true}},
		"in the request's first second":       {approvals: []v1alpha1.Approval{approve(0)}, want: approvalAnswer{index: 0, spend: true}},
		"at expiresAt":                        {approvals: []v1alpha1.Approval{approve(time.Minute)}, want: approvalAnswer{index: 0, spend: true}},
		"before requestedAt":                  {approvals: []v1alpha1.Approval{approve(-time.Second)}, want: none},
		"after expiresAt":                     {approvals: []v1alpha1.Approval{approve(time.Minute + time.Second)}, want: none},
		"used once admits nothing more":       {approvals: []v1alpha1.Approval{approve(time.Second)}, used: []int32{0}, want: none},
		"two approvals admit two calls":       {approvals: []v1alpha1.Approval{approve(time.Second), approve(2 * time.Second)}, used: []int32{1}, want: approvalAnswer{index: 0, spend: true}},
		"the latest unspent decision answers": {approvals: []v1alpha1.Approval{approve(time.Second), deny(2 * time.Second)}, want: approvalAnswer{index: 1}},
		"a deny then an approval":             {approvals: []v1alpha1.Approval{deny(time.Second), approve(2 * time.Second)}, want: approvalAnswer{index: 1, spend: true}},
		"a standing approval is spent first":  {approvals: []v1alpha1.Approval{standing(time.Second)}, want: approvalAnswer{index: 0, spend: true}},
		"a used standing approval admits again, outside any window": {
			approvals: []v1alpha1.Approval{standing(-time.Hour)}, used: []int32{0}, want: approvalAnswer{index: 0}},
		"a later decision replaces a standing approval": {
			approvals: []v1alpha1.Approval{standing(-time.Hour), deny(-time.Minute)}, used: []int32{0}, want: none},
		"an unused standing approval outside the window admits nothing": {
			approvals: []v1alpha1.Approval{standing(-time.Hour)}, want: none},
		"truncated arguments need the hash": {approvals: []v1alpha1.Approval{approve(time.Second)}, args: long, want: none},
		"truncated arguments with their hash": {
			approvals: []v1alpha1.Approval{withHash(approve(time.Second), long.sha256)}, args: long, want: approvalAnswer{index: 0, spend: true}},
		"a hash of other arguments": {
			approvals: []v1alpha1.Approval{withHash(approve(time.Second), long.sha256)}, args: short, want: none},
		"a deny of truncated arguments needs no hash": {approvals: []v1alpha1.Approval{deny(time.Second)}, args: long, want: approvalAnswer{index: 0}},
	} {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			if args.sha256 == "" {
				args = short
			}
			got, ok := answerApproval(tc.approvals, tc.used, "a", w, args)
			if !ok {
				got = none
			}
			got.decision = v1alpha1.Approval{}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(approvalAnswer{})); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}
