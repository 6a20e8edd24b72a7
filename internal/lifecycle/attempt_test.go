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
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestAttemptSpec(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: v1alpha1.ResearchRunSpec{
		Goal:   "g",
		Budget: v1alpha1.Budget{Deadline: &metav1.Duration{Duration: time.Hour}},
	}}
	policy := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.RuntimePolicySpec{
		DefaultMode: v1alpha1.ModePlan, Models: []v1alpha1.Model{{Name: "m", BaseURL: "https://x"}},
		Harness: &v1alpha1.HarnessPolicy{DisallowedTools: []string{"WebFetch"}},
	}}
	prev := &v1alpha1.RunAttempt{Spec: v1alpha1.RunAttemptSpec{Policy: v1alpha1.PolicySnapshot{Name: "old"}}}
	d := Decision{Grant: v1alpha1.Grant{ModelRequests: 3}}
	d.Status.Phase, d.Status.StartTime = v1alpha1.PhaseRunning, &start

	cases := []struct {
		name       string
		in         AttemptSpecInput
		wantPolicy string
		wantMode   v1alpha1.PermissionMode
	}{
		{"a first attempt takes the policy's snapshot and default mode",
			AttemptSpecInput{Policy: policy, PolicyReady: true}, "p", v1alpha1.ModePlan},
		{"the session's current mode wins",
			AttemptSpecInput{Policy: policy, PolicyReady: true, Session: &v1alpha1.Session{
				Spec: v1alpha1.SessionSpec{Mode: v1alpha1.ModeEdit}, Status: v1alpha1.SessionStatus{Mode: v1alpha1.ModeAuto}}},
			"p", v1alpha1.ModeAuto},
		{"a replacement while the policy is not ready inherits the predecessor's snapshot",
			AttemptSpecInput{Policy: policy, PolicyReady: false, Previous: prev}, "old", v1alpha1.ModePlan},
		{"a replacement with a ready policy takes a new snapshot",
			AttemptSpecInput{Policy: policy, PolicyReady: true, Previous: prev}, "p", v1alpha1.ModePlan},
		{"an existing attempt keeps its snapshot",
			AttemptSpecInput{Policy: policy, PolicyReady: true, Current: &v1alpha1.RunAttemptSpec{Policy: v1alpha1.PolicySnapshot{Name: "kept"}}},
			"kept", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Run, tc.in.Decision, tc.in.Attempt, tc.in.PodName = run, d, 2, "r-2"
			got := AttemptSpec(tc.in)
			if got.Policy.Name != tc.wantPolicy || got.Mode != tc.wantMode {
				t.Errorf("policy %q mode %q, want %q %q", got.Policy.Name, got.Mode, tc.wantPolicy, tc.wantMode)
			}
			if got.RunName != "r" || got.Attempt != 2 || got.PodName != "r-2" || got.Grant.ModelRequests != 3 || got.RunPhase != v1alpha1.PhaseRunning {
				t.Errorf("identity or decision not carried: %+v", got)
			}
			if got.Deadline == nil || !got.Deadline.Equal(&metav1.Time{Time: start.Add(time.Hour)}) {
				t.Errorf("deadline = %v, want start + 1h", got.Deadline)
			}
			if got.HardDeadline == nil || !got.HardDeadline.Equal(&metav1.Time{Time: start.Add(time.Hour + DefaultFinalizationGrace)}) {
				t.Errorf("hard deadline = %v, want start + 1h + the default finalization grace", got.HardDeadline)
			}
			if tc.wantPolicy == "p" && (got.Policy.Harness == nil || got.Policy.Harness.DisallowedTools[0] != "WebFetch") {
				t.Errorf("the harness rules not in the snapshot: %+v", got.Policy.Harness)
			}
			if tc.wantPolicy == "p" && len(got.Policy.Models) != 1 {
				t.Errorf("models not in the snapshot: %+v", got.Policy)
			}
			if tc.wantPolicy == "p" && (got.Policy.Events.Age() != v1alpha1.DefaultEventMaxAge ||
				got.Policy.Events.MaxBytes == nil || got.Policy.Events.MaxBytes.String() != "64Mi") {
				t.Errorf("events retention not defaulted in the snapshot: %+v", got.Policy.Events)
			}
		})
	}
}

func TestAttemptSpecCopiesEventRetention(t *testing.T) {
	age := &metav1.Duration{Duration: time.Hour}
	size := resource.MustParse("100M")
	policy := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.RuntimePolicySpec{
		Events: v1alpha1.EventRetention{MaxAge: age, MaxBytes: &size},
	}}
	got := AttemptSpec(AttemptSpecInput{Run: &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Name: "r"}},
		Policy: policy, PolicyReady: true, Attempt: 1})
	ev := got.Policy.Events
	if ev.Age() != time.Hour || ev.Bytes() != 100_000_000 || ev.MaxBytes.String() != "100M" {
		t.Errorf("snapshot events = %v / %v, want 1h / 100M", ev.MaxAge, ev.MaxBytes)
	}
	if ev.MaxAge == age || ev.MaxBytes == &size {
		t.Error("the snapshot shares the policy's pointers")
	}
}

// A new snapshot carries the chain the reconciler resolved from the policy's
// validated spec (Input.Chain), never the policy's status.resolvedChain.
func TestAttemptSpecSnapshotsTheChainGivenNotTheStatus(t *testing.T) {
	fromSpec := []v1alpha1.ResolvedInterceptor{{Name: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, OnError: v1alpha1.PostureDeny, Veto: true}}
	policy := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: v1alpha1.RuntimePolicyStatus{
		ResolvedChain: []v1alpha1.ResolvedInterceptor{{Name: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, OnError: v1alpha1.PostureAllow}},
	}}
	got := AttemptSpec(AttemptSpecInput{Run: &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Name: "r"}},
		Policy: policy, PolicyReady: true, Chain: fromSpec, Attempt: 1})
	if diff := cmp.Diff(fromSpec, got.Policy.ResolvedChain); diff != "" {
		t.Errorf("snapshot chain (-from spec +got):\n%s", diff)
	}
}
