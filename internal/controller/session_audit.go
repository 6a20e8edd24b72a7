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
	"slices"
	"strings"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

const (
	// maxSwitchQueuedNames bounds a modeHistory entry's queuedRuns; its
	// moreQueuedRuns counts the rest.
	maxSwitchQueuedNames = 10
	// eventNoteLimit is the most bytes the API server accepts in an Event's
	// note; a longer one is refused and the Event lost.
	eventNoteLimit = 1024
)

// withSwitchContext returns change with what the session was doing at the
// switch: the run holding it, that run's phase and steps, and the runs
// waiting behind it. status is the session's freshly counted status
// (countRuns), runs the session's runs; whatever context change carried is
// replaced. Pure: the reconciler gathers status and runs from its cache.
func withSwitchContext(change v1alpha1.ModeChange, status *v1alpha1.SessionStatus, runs []v1alpha1.ResearchRun) v1alpha1.ModeChange {
	change.ActiveRun, change.ActiveRunPhase, change.ActiveRunSteps = "", "", 0
	change.QueuedRuns, change.MoreQueuedRuns = nil, 0

	if active := holderOf(status.ActiveRun, runs); active != nil {
		change.ActiveRun = active.Name
		change.ActiveRunPhase = active.Status.Phase
		if change.ActiveRunPhase == "" {
			change.ActiveRunPhase = v1alpha1.PhasePending
		}
		change.ActiveRunSteps = max(active.Status.Steps, 0)
	}
	// countRuns lists the waiting runs without the one status.activeRun names;
	// a run holding the session by phase is not waiting either.
	change.QueuedRuns = slices.Clone(status.QueuedRuns[:min(len(status.QueuedRuns), maxSwitchQueuedNames)])
	change.MoreQueuedRuns = max(status.QueuedCount-int32(len(change.QueuedRuns)), 0)
	return change
}

// holderOf returns the run that holds the session: the one status.activeRun
// names if it is there and not Terminated, else one in an active phase (which
// holds the session even if status.activeRun was lost; the earliest, should
// there ever be several), else nil.
func holderOf(activeRun string, runs []v1alpha1.ResearchRun) *v1alpha1.ResearchRun {
	var byPhase *v1alpha1.ResearchRun
	for i := range runs {
		run := &runs[i]
		if activeRun != "" && run.Name == activeRun && run.Status.Phase != v1alpha1.PhaseTerminated {
			return run
		}
		if run.Status.Phase.IsActive() && (byPhase == nil || fifo(run, byPhase) < 0) {
			byPhase = run
		}
	}
	return byPhase
}

// modeChangeNote is the PermissionModeChanged Event's note: who switched from
// what to what, what the session was doing, and why. The reason comes last
// and the note is cut to the API server's limit (with "…"), so a long reason
// or queue never costs the Event; status.modeHistory keeps them whole.
func modeChangeNote(change v1alpha1.ModeChange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s switched the permission mode from %s to %s ", change.By, displayMode(change.From), change.To)
	queued := "nothing"
	if len(change.QueuedRuns) > 0 {
		queued = strings.Join(change.QueuedRuns, ", ")
		if change.MoreQueuedRuns > 0 {
			queued += fmt.Sprintf(" and %d more", change.MoreQueuedRuns)
		}
	} else if change.MoreQueuedRuns > 0 {
		queued = fmt.Sprintf("%d runs", change.MoreQueuedRuns)
	}
	if change.ActiveRun == "" {
		fmt.Fprintf(&b, "with no active run and %s queued", queued)
	} else {
		fmt.Fprintf(&b, "during run %s (%s, step %d) with %s queued", change.ActiveRun, change.ActiveRunPhase, change.ActiveRunSteps, queued)
	}
	fmt.Fprintf(&b, ": %s", change.Reason)
	return textutil.Truncate(b.String(), eventNoteLimit)
}
