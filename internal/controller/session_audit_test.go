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
package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

func auditRun(name string, phase v1alpha1.Phase, steps int64, created int) v1alpha1.ResearchRun {
	return v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+created), 0))},
		Status:     v1alpha1.ResearchRunStatus{Phase: phase, Steps: steps},
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i+1)
	}
	return out
}

// TestWithSwitchContext: which run a mode switch names as the session's
// active run, with what phase and steps, and which runs as queued.
func TestWithSwitchContext(t *testing.T) {
	stamp := v1alpha1.ModeChange{From: v1alpha1.ModePlan, To: v1alpha1.ModeEdit, By: "bob", Reason: "drafting",
		Time: metav1.NewTime(time.Unix(5000, 0))}
	type ctxFields struct {
		ActiveRun      string
		ActiveRunPhase v1alpha1.Phase
		ActiveRunSteps int64
		QueuedRuns     []string
		MoreQueuedRuns int32
	}
	for _, tc := range []struct {
		name   string
		stamp  func(*v1alpha1.ModeChange)
		status v1alpha1.SessionStatus
		runs   []v1alpha1.ResearchRun
		want   ctxFields
	}{{
		name:   "no runs at all",
		status: v1alpha1.SessionStatus{},
		want:   ctxFields{},
	}, {
		name:   "a running run with steps and one queued",
		status: v1alpha1.SessionStatus{ActiveRun: "r1", QueuedRuns: []string{"r2"}, QueuedCount: 1},
		runs:   []v1alpha1.ResearchRun{auditRun("r1", v1alpha1.PhaseRunning, 3, 1), auditRun("r2", v1alpha1.PhaseQueued, 0, 2)},
		want:   ctxFields{ActiveRun: "r1", ActiveRunPhase: v1alpha1.PhaseRunning, ActiveRunSteps: 3, QueuedRuns: []string{"r2"}},
	}, {
		name:   "a finalizing run keeps its steps",
		status: v1alpha1.SessionStatus{ActiveRun: "r1"},
		runs:   []v1alpha1.ResearchRun{auditRun("r1", v1alpha1.PhaseFinalizing, 40, 1)},
		want:   ctxFields{ActiveRun: "r1", ActiveRunPhase: v1alpha1.PhaseFinalizing, ActiveRunSteps: 40},
	}, {
		name:   "a run that claimed the session but has no phase yet is Pending",
		status: v1alpha1.SessionStatus{ActiveRun: "r1"},
		runs:   []v1alpha1.ResearchRun{auditRun("r1", "", 0, 1)},
		want:   ctxFields{ActiveRun: "r1", ActiveRunPhase: v1alpha1.PhasePending},
	}, {
		name:   "a claimed, still Queued holder is named with its phase",
		status: v1alpha1.SessionStatus{ActiveRun: "r2", QueuedRuns: []string{"r3"}, QueuedCount: 1},
		runs: []v1alpha1.ResearchRun{auditRun("r1", v1alpha1.PhaseTerminated, 9, 1), auditRun("r2", v1alpha1.PhaseQueued, 0, 2),
			auditRun("r3", v1alpha1.PhaseQueued, 0, 3)},
		want: ctxFields{ActiveRun: "r2", ActiveRunPhase: v1alpha1.PhaseQueued, QueuedRuns: []string{"r3"}},
	}, {
		name:   "only terminated runs: no active run",
		status: v1alpha1.SessionStatus{},
		runs:   []v1alpha1.ResearchRun{auditRun("r1", v1alpha1.PhaseTerminated, 12, 1)},
		want:   ctxFields{},
	}, {
		name:   "queued runs while no run holds the session (e.g. its policy is missing)",
		status: v1alpha1.SessionStatus{QueuedRuns: []string{"r1", "r2"}, QueuedCount: 2},
		runs:   []v1alpha1.ResearchRun{auditRun("r1", v1alpha1.PhasePending, 0, 1), auditRun("r2", v1alpha1.PhasePending, 0, 2)},
		want:   ctxFields{QueuedRuns: []string{"r1", "r2"}},
	}, {
		name:   "activeRun lost: the run in an active phase holds the session",
		status: v1alpha1.SessionStatus{QueuedRuns: []string{"r3"}, QueuedCount: 1},
		runs: []v1alpha1.ResearchRun{auditRun("r3", v1alpha1.PhaseQueued, 0, 3), auditRun("r2", v1alpha1.PhaseRecovering, 7, 2),
			auditRun("r1", v1alpha1.PhaseTerminated, 5, 1)},
		want: ctxFields{ActiveRun: "r2", ActiveRunPhase: v1alpha1.PhaseRecovering, ActiveRunSteps: 7, QueuedRuns: []string{"r3"}},
	}, {
		name:   "activeRun names a run that is gone: the run in an active phase holds it",
		status: v1alpha1.SessionStatus{ActiveRun: "deleted"},
		runs:   []v1alpha1.ResearchRun{auditRun("r2", v1alpha1.PhaseRunning, 1, 2)},
		want:   ctxFields{ActiveRun: "r2", ActiveRunPhase: v1alpha1.PhaseRunning, ActiveRunSteps: 1},
	}, {
		name:   "several in an active phase (never expected): the earliest",
		status: v1alpha1.SessionStatus{},
		runs:   []v1alpha1.ResearchRun{auditRun("b", v1alpha1.PhaseRunning, 2, 2), auditRun("a", v1alpha1.PhaseRunning, 1, 2)},
		want:   ctxFields{ActiveRun: "a", ActiveRunPhase: v1alpha1.PhaseRunning, ActiveRunSteps: 1},
	}, {
		name:   "the first 10 of the queue are named, the rest counted",
		status: v1alpha1.SessionStatus{ActiveRun: "r", QueuedRuns: names("q", 20), QueuedCount: 37},
		runs:   []v1alpha1.ResearchRun{auditRun("r", v1alpha1.PhaseRunning, 2, 0)},
		want: ctxFields{ActiveRun: "r", ActiveRunPhase: v1alpha1.PhaseRunning, ActiveRunSteps: 2,
			QueuedRuns: names("q", 10), MoreQueuedRuns: 27},
	}, {
		name:   "exactly 10 queued: none more",
		status: v1alpha1.SessionStatus{QueuedRuns: names("q", 10), QueuedCount: 10},
		want:   ctxFields{QueuedRuns: names("q", 10)},
	}, {
		name: "context carried in the stamp is replaced, never trusted",
		stamp: func(c *v1alpha1.ModeChange) {
			c.ActiveRun, c.ActiveRunPhase, c.ActiveRunSteps = "forged", v1alpha1.PhaseRunning, 99
			c.QueuedRuns, c.MoreQueuedRuns = []string{"x"}, 4
		},
		status: v1alpha1.SessionStatus{},
		want:   ctxFields{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := stamp
			if tc.stamp != nil {
				tc.stamp(&in)
			}
			got := withSwitchContext(in, &tc.status, tc.runs)
			if got.By != stamp.By || got.From != stamp.From || got.To != stamp.To || got.Reason != stamp.Reason || !got.Time.Equal(&stamp.Time) {
				t.Errorf("the stamp's who/what/why/when changed: %+v", got)
			}
			fields := ctxFields{got.ActiveRun, got.ActiveRunPhase, got.ActiveRunSteps, got.QueuedRuns, got.MoreQueuedRuns}
			if diff := cmp.Diff(tc.want, fields, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("switch context (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModeChangeNote: the PermissionModeChanged Event's note says who, from
// and to, what the session was doing, and why — and always fits the API
// server's limit.
func TestModeChangeNote(t *testing.T) {
	base := v1alpha1.ModeChange{From: v1alpha1.ModePlan, To: v1alpha1.ModeEdit, By: "bob", Reason: "drafting the report"}
	with := func(mutate func(*v1alpha1.ModeChange)) v1alpha1.ModeChange {
		c := base
		mutate(&c)
		return c
	}
	for _, tc := range []struct {
		name   string
		change v1alpha1.ModeChange
		want   string
	}{{
		name:   "no active run, nothing queued",
		change: base,
		want:   "bob switched the permission mode from Plan to Edit with no active run and nothing queued: drafting the report",
	}, {
		name: "a running run and one queued",
		change: with(func(c *v1alpha1.ModeChange) {
			c.ActiveRun, c.ActiveRunPhase, c.ActiveRunSteps, c.QueuedRuns = "r1", v1alpha1.PhaseRunning, 3, []string{"r2"}
		}),
		want: "bob switched the permission mode from Plan to Edit during run r1 (Running, step 3) with r2 queued: drafting the report",
	}, {
		name: "a run at step 0 and nothing queued",
		change: with(func(c *v1alpha1.ModeChange) {
			c.ActiveRun, c.ActiveRunPhase = "r1", v1alpha1.PhaseRunning
		}),
		want: "bob switched the permission mode from Plan to Edit during run r1 (Running, step 0) with nothing queued: drafting the report",
	}, {
		name: "no active run but runs waiting",
		change: with(func(c *v1alpha1.ModeChange) {
			c.QueuedRuns = []string{"r1", "r2"}
		}),
		want: "bob switched the permission mode from Plan to Edit with no active run and r1, r2 queued: drafting the report",
	}, {
		name: "more queued than named",
		change: with(func(c *v1alpha1.ModeChange) {
			c.ActiveRun, c.ActiveRunPhase, c.ActiveRunSteps = "r", v1alpha1.PhaseRecovering, 12
			c.QueuedRuns, c.MoreQueuedRuns = []string{"a", "b"}, 5
		}),
		want: "bob switched the permission mode from Plan to Edit during run r (Recovering, step 12) with a, b and 5 more queued: drafting the report",
	}, {
		name:   "a session created with a mode: from the default",
		change: with(func(c *v1alpha1.ModeChange) { c.From = "" }),
		want:   "bob switched the permission mode from (default) to Edit with no active run and nothing queued: drafting the report",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := modeChangeNote(tc.change); got != tc.want {
				t.Errorf("note\n got %q\nwant %q", got, tc.want)
			}
		})
	}

	t.Run("a long reason and queue are cut to the limit on a rune boundary, the context kept", func(t *testing.T) {
		long := with(func(c *v1alpha1.ModeChange) {
			c.ActiveRun, c.ActiveRunPhase, c.ActiveRunSteps = "r1", v1alpha1.PhaseRunning, 3
			c.QueuedRuns = names(strings.Repeat("q", 240), 10)
			c.Reason = strings.Repeat("谁切的、为什么切、切之前在做什么", 40)
		})
		got := modeChangeNote(long)
		if len(got) > eventNoteLimit || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
			t.Errorf("note of %d bytes (valid UTF-8: %t), want at most %d ending in …", len(got), utf8.ValidString(got), eventNoteLimit)
		}
		if !strings.HasPrefix(got, "bob switched the permission mode from Plan to Edit during run r1 (Running, step 3) with ") {
			t.Errorf("the context did not survive the cut: %q", got[:120])
		}
	})
	t.Run("a note at the limit is left alone", func(t *testing.T) {
		s := strings.Repeat("x", eventNoteLimit)
		if got := textutil.Truncate(s, eventNoteLimit); got != s {
			t.Errorf("a note of exactly %d bytes was cut to %d", eventNoteLimit, len(got))
		}
	})
}
