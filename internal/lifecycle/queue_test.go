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
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func TestAdmit(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	e := func(name string, s int, phase v1alpha1.Phase) QueueEntry {
		return QueueEntry{Name: name, Created: at(s), Phase: phase}
	}
	admitted := func(q QueueEntry) QueueEntry { q.Admitted = true; return q }
	deleting := func(q QueueEntry) QueueEntry { q.Deleting = true; return q }
	const limit, timeout = 2, time.Minute

	cases := []struct {
		name string
		run  string
		runs []QueueEntry
		want QueueView
	}{
		{"alone and new: starts", "a", []QueueEntry{e("a", 0, "")},
			QueueView{Holder: true}},
		{"missing from the view (the cache has not shown it): starts when free", "a", nil,
			QueueView{Holder: true}},
		{"active run holds", "a", []QueueEntry{e("a", 0, v1alpha1.PhaseFinalizing), e("b", 1, v1alpha1.PhaseQueued)},
			QueueView{Holder: true}},
		{"behind an active run: position 1", "b", []QueueEntry{e("a", 0, v1alpha1.PhaseRunning), e("b", 1, v1alpha1.PhaseQueued)},
			QueueView{Position: 1}},
		{"behind an admitted run the view shows Queued", "b", []QueueEntry{admitted(e("a", 0, v1alpha1.PhaseQueued)), e("b", 1, "")},
			QueueView{Position: 1}},
		{"admitted but not first in FIFO still holds", "a", []QueueEntry{e("a", 0, ""), admitted(e("b", 1, ""))},
			QueueView{Position: 1}},
		{"free session: the FIFO head starts", "a", []QueueEntry{e("b", 1, v1alpha1.PhaseQueued), e("a", 0, v1alpha1.PhaseQueued)},
			QueueView{Holder: true}},
		{"free session: the second waits at 2", "b", []QueueEntry{e("b", 1, v1alpha1.PhaseQueued), e("a", 0, v1alpha1.PhaseQueued)},
			QueueView{Position: 2}},
		{"creation ties are broken by name", "b", []QueueEntry{e("b", 0, ""), e("a", 0, "")},
			QueueView{Position: 2}},
		{"terminated and deleting runs neither hold nor wait", "c",
			[]QueueEntry{e("a", 0, v1alpha1.PhaseTerminated), deleting(e("b", 1, v1alpha1.PhaseRunning)), e("c", 2, v1alpha1.PhaseQueued)},
			QueueView{Holder: true}},
		{"an admitted run that terminated no longer holds", "b",
			[]QueueEntry{admitted(e("a", 0, v1alpha1.PhaseTerminated)), e("b", 1, v1alpha1.PhaseQueued)},
			QueueView{Holder: true}},
		{"beyond the limit", "d", []QueueEntry{e("a", 0, v1alpha1.PhaseRunning), e("b", 1, ""), e("c", 2, ""), e("d", 3, "")},
			QueueView{Position: 3}},
		{"missing from the view while held: last", "z", []QueueEntry{e("a", 0, v1alpha1.PhaseRunning), e("b", 1, "")},
			QueueView{Position: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Limit, tc.want.Timeout = limit, timeout
			if got := Admit(tc.run, tc.runs, limit, timeout); got != tc.want {
				t.Errorf("Admit(%q) = %+v, want %+v", tc.run, got, tc.want)
			}
		})
	}
}

// TestAdmitSingleHolder checks the rule the session invariant rests on: for
// any set of runs, at most one is the holder, and it is the one Holder names
// when any run already holds the session.
func TestAdmitSingleHolder(t *testing.T) {
	phases := []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseQueued, v1alpha1.PhaseRunning,
		v1alpha1.PhaseRecovering, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated}
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for trial := range 20000 {
		n := 1 + rng.IntN(6)
		runs := make([]QueueEntry, n)
		active := 0
		for i := range runs {
			runs[i] = QueueEntry{Name: string(rune('a' + i)), Created: t0.Add(time.Duration(rng.IntN(3)) * time.Second),
				Phase: phases[rng.IntN(len(phases))], Deleting: rng.IntN(8) == 0}
			if active == 0 && rng.IntN(4) == 0 {
				runs[i].Admitted = true
			}
			if runs[i].holds() {
				active++
			}
		}
		if active > 1 {
			continue // not a state the single writer produces
		}
		holders := 0
		for _, r := range runs {
			if v := Admit(r.Name, runs, 10, 0); v.Holder {
				holders++
				if h := Holder(runs); h != "" && h != r.Name {
					t.Fatalf("trial %d: %s is the holder but Holder names %s: %+v", trial, r.Name, h, runs)
				}
			}
		}
		if holders > 1 {
			t.Fatalf("trial %d: %d holders: %+v", trial, holders, runs)
		}
	}
}
