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
	"cmp"
	"fmt"
	"slices"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Bounds of the reported state, matching the RunAttempt status schema.
const (
	// maxCalls is how many call fingerprints status.calls reports (top-K by count).
	maxCalls = 32
	// maxFaults is how many fault entries status.faults holds; beyond it new
	// kinds are counted in one "Other" entry, so no occurrence is lost.
	maxFaults = 32
	// maxAdvice is how many advice entries status.advice holds; beyond it new
	// kinds are counted in one "Other" entry.
	maxAdvice = 16
	// maxInFlight is how many side-effecting calls may be in flight at once;
	// more wait for a slot.
	maxInFlight = 16
	// maxAwaitingApproval is how many approvals may be awaited at once; more
	// wait for a slot.
	maxAwaitingApproval = 16
	// maxCheckpoint is the longest checkpoint, in bytes.
	maxCheckpoint = 4096
	// maxTrackedCalls bounds the local fingerprint table from which the
	// top-K is reported.
	maxTrackedCalls = 1024
	// maxMessage is the longest fault message kept.
	maxMessage = 512
)

// overflowKind is the entry that counts fault and advice kinds beyond the bounds.
const overflowKind = "Other"

// facts is the agent's local reported state: the source of truth for what
// the RunAttempt status says. Every table is bounded by construction.
type facts struct {
	usage            v1alpha1.Usage
	steps            int64
	lastProgressStep int64
	calls            map[string]*v1alpha1.CallCount
	inFlight         []v1alpha1.InFlightEffect
	faults           []v1alpha1.Fault
	advice           []v1alpha1.Advice
	awaiting         []v1alpha1.ApprovalRequest
	usedApprovals    []int32
	finishProposed   bool
	publication      v1alpha1.Publication
	checkpoint       string
	// finalizeBase is the usage the reserve is served on top of, recorded
	// once when the attempt is first served as finalizing.
	finalizeBase *v1alpha1.Usage
	// grantExhausted is the first refusal on the working grant.
	grantExhausted *v1alpha1.GrantExhaustion
	// children are the budgets the attempt carved for child runs.
	children []v1alpha1.ChildCarve
	// securityPosture is this gateway's: not seeded from an earlier
	// process, which had its own evidence.
	securityPosture *v1alpha1.SecurityPosture
	// answers are the digests of the attempt's last model answers
	// (progress.go); in memory only.
	answers []string
}

// seed takes over what an earlier process of this same attempt reported, so
// counters never go backwards and no recorded fact is dropped. Awaited
// approvals are requests of that process, not facts, and are not kept (the
// keeper keeps their windows); used approvals are facts and are.
func (f *facts) seed(s v1alpha1.RunAttemptStatus) {
	f.usage = s.Usage
	f.steps, f.lastProgressStep = s.Steps, s.LastProgressStep
	f.calls = map[string]*v1alpha1.CallCount{}
	for _, c := range s.Calls {
		f.calls[c.Fingerprint] = &v1alpha1.CallCount{Tool: c.Tool, Fingerprint: c.Fingerprint, Count: c.Count}
	}
	f.inFlight = slices.Clone(s.InFlight)
	f.faults = slices.Clone(s.Faults)
	f.advice = slices.Clone(s.Advice)
	f.usedApprovals = slices.Clone(s.UsedApprovals)
	f.finishProposed = s.FinishProposed
	f.publication = s.Publication
	f.checkpoint = s.Checkpoint
	f.finalizeBase = s.FinalizeBase.DeepCopy()
	f.grantExhausted = s.GrantExhausted.DeepCopy()
	f.children = slices.Clone(s.Children)
}

// countCall counts one dispatched call of fingerprint; a fingerprint not
// seen before is progress.
func (f *facts) countCall(tool, fingerprint string) {
	if f.calls == nil {
		f.calls = map[string]*v1alpha1.CallCount{}
	}
	if c, ok := f.calls[fingerprint]; ok {
		c.Count++
		return
	}
	f.noteProgress()
	if len(f.calls) >= maxTrackedCalls {
		// Evict the least counted fingerprint: it is far below the top-K.
		var victim *v1alpha1.CallCount
		for _, c := range f.calls {
			if victim == nil || c.Count < victim.Count || (c.Count == victim.Count && c.Fingerprint > victim.Fingerprint) {
				victim = c
			}
		}
		delete(f.calls, victim.Fingerprint)
	}
	f.calls[fingerprint] = &v1alpha1.CallCount{Tool: tool, Fingerprint: fingerprint, Count: 1}
}

// topCalls is the top-K of the fingerprint table by count, ties broken by
// tool and fingerprint so the reported list is deterministic.
func (f *facts) topCalls() []v1alpha1.CallCount {
	if len(f.calls) == 0 {
		return nil
	}
	all := make([]v1alpha1.CallCount, 0, len(f.calls))
	for _, c := range f.calls {
		all = append(all, *c)
	}
	slices.SortFunc(all, func(a, b v1alpha1.CallCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	if len(all) > maxCalls {
		all = all[:maxCalls]
	}
	return all
}

// addFault counts one occurrence of a fault. A new (scope, kind) beyond the
// bound is counted in the single overflow entry (scope Agent, kind Other),
// whose message names the real scope and kind: the count is never lost, and
// an escalation is never lost either.
func (f *facts) addFault(scope v1alpha1.FaultScope, kind string, retryable, escalated bool, msg string) {
	kind = textutil.Truncate(kind, 128)
	msg = textutil.Truncate(msg, maxMessage)
	i := slices.IndexFunc(f.faults, func(x v1alpha1.Fault) bool { return x.Scope == scope && x.Kind == kind })
	if i < 0 && len(f.faults) >= maxFaults-1 {
		msg = textutil.Truncate(fmt.Sprintf("%s/%s: %s", scope, kind, msg), maxMessage)
		scope, kind = v1alpha1.FaultScopeAgent, overflowKind
		i = slices.IndexFunc(f.faults, func(x v1alpha1.Fault) bool { return x.Scope == scope && x.Kind == kind })
	}
	if i < 0 {
		f.faults = append(f.faults, v1alpha1.Fault{Scope: scope, Kind: kind})
		i = len(f.faults) - 1
	}
	e := &f.faults[i]
	// An escalated fault's retryability is the escalation's: a later,
	// local occurrence of the same kind does not make a non-retryable
	// failure retryable again (the operator would recover from it).
	switch {
	case escalated && e.Escalated:
		e.Retryable = e.Retryable && retryable
	case escalated || !e.Escalated:
		e.Retryable = retryable
	}
	e.Count++
	e.Escalated = e.Escalated || escalated
	if msg != "" {
		e.LastMessage = msg
	}
}

// addAdvice counts one piece of advice; beyond the bound, in one Other entry.
func (f *facts) addAdvice(source, kind string) {
	source, kind = textutil.Truncate(source, 128), textutil.Truncate(kind, 128)
	i := slices.IndexFunc(f.advice, func(x v1alpha1.Advice) bool { return x.Source == source && x.Kind == kind })
	if i < 0 && len(f.advice) >= maxAdvice-1 {
		source, kind = overflowKind, overflowKind
		i = slices.IndexFunc(f.advice, func(x v1alpha1.Advice) bool { return x.Source == source && x.Kind == kind })
	}
	if i < 0 {
		f.advice = append(f.advice, v1alpha1.Advice{Source: source, Kind: kind})
		i = len(f.advice) - 1
	}
	f.advice[i].Count++
}

func (f *facts) removeInFlight(id string) {
	f.inFlight = slices.DeleteFunc(f.inFlight, func(e v1alpha1.InFlightEffect) bool { return e.ID == id })
}

// isAwaiting reports whether actionID awaits a decision.
func (f *facts) isAwaiting(id string) bool {
	return slices.ContainsFunc(f.awaiting, func(a v1alpha1.ApprovalRequest) bool { return a.ActionID == id })
}

func (f *facts) removeAwaiting(id string) bool {
	n := len(f.awaiting)
	f.awaiting = slices.DeleteFunc(f.awaiting, func(a v1alpha1.ApprovalRequest) bool { return a.ActionID == id })
	return len(f.awaiting) != n
}

// render is the status the facts say, without heartbeat and generation.
func (f *facts) render() v1alpha1.RunAttemptStatus {
	return v1alpha1.RunAttemptStatus{
		Usage:            f.usage,
		Steps:            f.stepCount(),
		LastProgressStep: f.lastProgressStep,
		Calls:            f.topCalls(),
		InFlight:         slices.Clone(f.inFlight),
		Faults:           slices.Clone(f.faults),
		Advice:           slices.Clone(f.advice),
		AwaitingApproval: slices.Clone(f.awaiting),
		UsedApprovals:    slices.Clone(f.usedApprovals),
		FinishProposed:   f.finishProposed,
		Publication:      f.publication,
		Checkpoint:       f.checkpoint,
		FinalizeBase:     f.finalizeBase.DeepCopy(),
		GrantExhausted:   f.grantExhausted.DeepCopy(),
		Children:         slices.Clone(f.children),
		SecurityPosture:  f.securityPosture.DeepCopy(),
	}
}

// escalationPersisted reports whether the escalation of (scope, kind) in
// current — or of the overflow entry it was counted under — is already in
// written as it is now: escalated, and as retryable.
func escalationPersisted(written, current []v1alpha1.Fault, scope v1alpha1.FaultScope, kind string) bool {
	find := func(fs []v1alpha1.Fault, scope v1alpha1.FaultScope, kind string) (v1alpha1.Fault, bool) {
		i := slices.IndexFunc(fs, func(x v1alpha1.Fault) bool { return x.Scope == scope && x.Kind == kind })
		if i < 0 {
			return v1alpha1.Fault{}, false
		}
		return fs[i], true
	}
	kind = textutil.Truncate(kind, 128)
	cur, ok := find(current, scope, kind)
	if !ok {
		scope, kind = v1alpha1.FaultScopeAgent, overflowKind
		if cur, ok = find(current, scope, kind); !ok {
			return false
		}
	}
	w, ok := find(written, scope, kind)
	return ok && w.Escalated && cur.Escalated && w.Retryable == cur.Retryable
}
