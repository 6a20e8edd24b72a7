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
	"slices"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// QueueEntry is one run of a session as admission sees it.
type QueueEntry struct {
	Name    string
	Created time.Time
	Phase   v1alpha1.Phase
	// Deleting: the run has a deletion timestamp; it neither holds the
	// session nor waits in its queue.
	Deleting bool
	// Admitted: the admitting process has written (or is writing) this run's
	// start and its view of the run does not show it yet. It holds the
	// session like an active run.
	Admitted bool
	// Child: the run is a child run; it runs in its parent's slot, so it
	// neither holds its session nor waits in its queue.
	Child bool
}

// holds reports whether e occupies its session: it is active (Running,
// Recovering, Finalizing) or admitted and not yet seen active.
func (e QueueEntry) holds() bool {
	return !e.Child && !e.Deleting && e.Phase != v1alpha1.PhaseTerminated && (e.Phase.IsActive() || e.Admitted)
}

// waits reports whether e waits in its session's queue.
func (e QueueEntry) waits() bool {
	return !e.Child && !e.Deleting && !e.holds() && e.Phase.IsWaiting()
}

// FIFO orders queue entries in the order a session's runs are admitted
// (v1alpha1.AdmissionOrder: creation time, name breaking ties).
func FIFO(a, b QueueEntry) int {
	return v1alpha1.AdmissionOrder(a.Created, a.Name, b.Created, b.Name)
}

// Admit says where run stands in its session's queue, given every run of the
// session (in any order) and the queue's limit and timeout. It is the whole
// admission rule, and it is pure:
//
//   - a run that holds the session (active or admitted) is the holder;
//   - while another run holds it, run waits at its FIFO position among the
//     waiting runs (1-based); beyond Limit it is QueueFull (the Queue rung);
//   - when no run holds it, the first waiting run in FIFO order is the holder
//     and may start now; the others wait behind it.
//
// At most one run of a session is ever the holder, so a single admitting
// writer that records the start it writes (QueueEntry.Admitted) until its
// view shows it never starts two runs of one session. A run missing from
// runs is the newest: it waits last. A run that is Terminated or being
// deleted is never the holder.
func Admit(run string, runs []QueueEntry, limit int32, timeout time.Duration) QueueView {
	view := QueueView{Limit: limit, Timeout: timeout}
	held, listed := false, false
	var waiting []QueueEntry
	for _, e := range runs {
		switch {
		case e.holds():
			if e.Name == run {
				view.Holder = true
				return view
			}
			held = true
		case e.waits():
			waiting = append(waiting, e)
		case e.Name == run:
			listed = true // terminated or being deleted: it never starts
		}
	}
	slices.SortFunc(waiting, FIFO)
	view.Position = int32(len(waiting) + 1)
	for i, e := range waiting {
		if e.Name == run {
			view.Position = int32(i + 1)
			break
		}
	}
	if !held && !listed && view.Position == 1 {
		view.Holder, view.Position = true, 0
	}
	return view
}

// Holder is the run that holds the session among runs, or "" when none does:
// the earliest active or admitted one (there is at most one while the
// single-writer rule holds; the earliest is the one a summary names).
func Holder(runs []QueueEntry) string {
	var best *QueueEntry
	for i := range runs {
		if e := &runs[i]; e.holds() && (best == nil || FIFO(*e, *best) < 0) {
			best = e
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}
