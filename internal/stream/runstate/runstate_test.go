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

package runstate

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
)

// publish folds evs into cp as a store would (assigning seqs), checking each
// validates.
func publish(t *testing.T, cp Checkpoint, evs []stream.Event) Checkpoint {
	t.Helper()
	for _, ev := range evs {
		if err := ev.Validate(); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
		ev.Seq = cp.Seq + 1
		cp = Fold(cp, ev)
	}
	return cp
}

func types(evs []stream.Event) []string {
	var out []string
	for _, ev := range evs {
		s := string(ev.Type)
		if ev.Type == stream.Custom {
			s += ":" + ev.Name
		}
		out = append(out, s)
	}
	return out
}

func expectTypes(t *testing.T, evs []stream.Event, want ...string) {
	t.Helper()
	got := types(evs)
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
}

func TestDiffFollowsARunToItsEnd(t *testing.T) {
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "survey", UID: "u-1"}}
	run.Spec.Budget.ModelRequests = 40
	var cp Checkpoint
	expectTypes(t, Diff(cp, run)) // no phase yet: nothing

	run.Status.Phase = v1alpha1.PhaseQueued
	evs := Diff(cp, run)
	expectTypes(t, evs, "RUN_STARTED", "STATE_SNAPSHOT")
	cp = publish(t, cp, evs)
	expectTypes(t, Diff(cp, run)) // nothing changed

	run.Status.Phase, run.Status.Attempt, run.Status.Message = v1alpha1.PhaseRunning, 1, "attempt 1 is running"
	evs = Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA")
	var ops []op
	if err := json.Unmarshal(evs[0].Patch, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 || ops[0].Path != "/phase" || ops[0].Op != "replace" || ops[1].Op != "add" {
		t.Fatalf("patch %s", evs[0].Patch)
	}
	cp = publish(t, cp, evs)

	run.Status.PendingApprovals = []v1alpha1.ApprovalRequest{{ActionID: "a-1", Tool: "repo.write", Risk: v1alpha1.RiskHigh}}
	evs = Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA", "CUSTOM:"+EventApprovalRequested)
	cp = publish(t, cp, evs)
	expectTypes(t, Diff(cp, run))

	run.Spec.Approvals = []v1alpha1.Approval{{ActionID: "a-1", Decision: v1alpha1.DecisionApprove, Approver: "alice"}}
	run.Status.PendingApprovals = nil
	evs = Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA", "CUSTOM:"+EventApprovalDecided)
	cp = publish(t, cp, evs)

	run.Status.Phase, run.Status.Reason, run.Status.Settlement = v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted, v1alpha1.SettlementComplete
	evs = Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA", "RUN_FINISHED")
	cp = publish(t, cp, evs)
	run.Status.Message = "changed after the end"
	expectTypes(t, Diff(cp, run)) // a finished run's stream is closed

	// The same name, created again: a new run on the same stream.
	run2 := run.DeepCopy()
	run2.UID, run2.Status, run2.Spec.Approvals = "u-2", v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseQueued}, nil
	expectTypes(t, Diff(cp, run2), "RUN_STARTED", "STATE_SNAPSHOT")
}

// A watcher restarted without its checkpoint rebuilds it from the stored
// events and publishes nothing twice.
func TestFoldRebuildsTheCheckpoint(t *testing.T) {
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "survey", UID: "u-1"}}
	run.Status.Phase = v1alpha1.PhaseRunning
	var stored []stream.Event
	var cp Checkpoint
	step := func() {
		for _, ev := range Diff(cp, run) {
			ev.Seq = cp.Seq + 1
			stored = append(stored, ev)
			cp = Fold(cp, ev)
		}
		// A gateway event between: it moves only the seq.
		gw := stream.Event{Type: stream.StepStarted, StepName: "model", Seq: cp.Seq + 1}
		stored = append(stored, gw)
		cp = Fold(cp, gw)
	}
	step()
	run.Status.Steps = 3
	step()
	run.Status.Phase, run.Status.Reason, run.Status.Settlement = v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted, v1alpha1.SettlementNone
	step()
	if last := stored[len(stored)-2]; last.Type != stream.RunError || last.Code != "BudgetExhausted" {
		t.Fatalf("last status event %+v", last)
	}
	var rebuilt Checkpoint
	for _, ev := range stored {
		raw, _ := json.Marshal(ev) // through the wire format, as Replay gives them
		var back stream.Event
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		rebuilt = Fold(rebuilt, back)
	}
	if !rebuilt.Finished || rebuilt.Seq != cp.Seq || rebuilt.RunUID != "u-1" {
		t.Fatalf("rebuilt %+v, want %+v", rebuilt, cp)
	}
	expectTypes(t, Diff(rebuilt, run))
}

// The run's stricter posture is a field of the state: a STATE_DELTA adds it
// when the run turns stricter and removes it when it is back to normal.
func TestSecurityPostureIsAStateDelta(t *testing.T) {
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "survey", UID: "u-1"}}
	run.Status.Phase, run.Status.Attempt = v1alpha1.PhaseRunning, 1
	var cp Checkpoint
	cp = publish(t, cp, Diff(cp, run))

	run.Status.SecurityPosture = &v1alpha1.SecurityPosture{Posture: v1alpha1.PostureConfirmAll, Interceptor: "auth",
		ErrorRate: 60, Message: "auth fails"}
	evs := Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA")
	var ops []op
	if err := json.Unmarshal(evs[0].Patch, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Op != "add" || ops[0].Path != "/securityPosture" {
		t.Fatalf("patch %s", evs[0].Patch)
	}
	cp = publish(t, cp, evs)

	run.Status.SecurityPosture = nil
	evs = Diff(cp, run)
	expectTypes(t, evs, "STATE_DELTA")
	if err := json.Unmarshal(evs[0].Patch, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Op != "remove" || ops[0].Path != "/securityPosture" {
		t.Fatalf("patch %s", evs[0].Patch)
	}
}
