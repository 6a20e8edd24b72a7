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

// Package runstate turns a ResearchRun's status into run-stream events: the
// state a subscriber sees (STATE_SNAPSHOT), what changed since the last
// events (STATE_DELTA, an RFC 6902 patch of top-level fields), the run's
// start and end (RUN_STARTED, RUN_FINISHED / RUN_ERROR) and approvals
// (CUSTOM agentrun.dev/approval-requested and -decided). It is pure: the
// watcher that applies it keeps a Checkpoint per run, and Fold rebuilds one
// from the events already stored, so a restarted watcher neither repeats
// nor skips an event.
package runstate

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
)

// The CUSTOM event names this package produces.
const (
	EventApprovalRequested = "agentrun.dev/approval-requested"
	EventApprovalDecided   = "agentrun.dev/approval-decided"
)

// Source is the metadata "source" of the events produced here: the run's
// status, as the operator wrote it.
const Source = "status"

var sourceMeta = json.RawMessage(`{"source":"` + Source + `"}`)

// State is what a subscriber is shown of a run: its STATE_SNAPSHOT.
type State struct {
	Phase            v1alpha1.Phase      `json:"phase,omitempty"`
	Reason           v1alpha1.Reason     `json:"reason,omitempty"`
	Settlement       v1alpha1.Settlement `json:"settlement,omitempty"`
	Message          string              `json:"message,omitempty"`
	QueuePosition    int32               `json:"queuePosition,omitempty"`
	Attempt          int32               `json:"attempt,omitempty"`
	Steps            int64               `json:"steps,omitempty"`
	Used             v1alpha1.Usage      `json:"used,omitzero"`
	Granted          v1alpha1.Usage      `json:"granted,omitzero"`
	Budget           v1alpha1.Usage      `json:"budget,omitzero"`
	Directives       []string            `json:"directives,omitempty"`
	Finalization     string              `json:"finalization,omitempty"`
	AwaitingApproval bool                `json:"awaitingApproval"`
	PendingApprovals []Approval          `json:"pendingApprovals,omitempty"`
	// SecurityPosture is the stricter posture the run is held to while a
	// Security interceptor of its policy fails (ConfirmAll, DenyWrites),
	// with why; absent when normal.
	SecurityPosture *SecurityPosture `json:"securityPosture,omitempty"`
}

// SecurityPosture is the run's stricter posture.
type SecurityPosture struct {
	Posture     v1alpha1.DegradedPosture `json:"posture"`
	Interceptor string                   `json:"interceptor,omitempty"`
	ErrorRate   int32                    `json:"errorRate,omitempty"`
	Message     string                   `json:"message,omitempty"`
}

// Approval is a tool call waiting for a decision.
type Approval struct {
	ActionID  string        `json:"actionID"`
	Tool      string        `json:"tool"`
	Risk      v1alpha1.Risk `json:"risk,omitempty"`
	Attempt   int32         `json:"attempt,omitempty"`
	Summary   string        `json:"summary,omitempty"`
	ExpiresAt string        `json:"expiresAt,omitempty"`
	// The full redacted arguments (up to v1alpha1.MaxApprovalArguments
	// bytes), their length and SHA-256, and whether they were cut.
	Arguments          string `json:"arguments,omitempty"`
	ArgumentsBytes     int64  `json:"argumentsBytes,omitempty"`
	ArgumentsSHA256    string `json:"argumentsSHA256,omitempty"`
	ArgumentsTruncated bool   `json:"argumentsTruncated,omitempty"`
}

// StateOf reads a run's State from its status.
func StateOf(run *v1alpha1.ResearchRun) State {
	st := run.Status
	s := State{
		Phase: st.Phase, Reason: st.Reason, Settlement: st.Settlement, Message: st.Message,
		QueuePosition: st.QueuePosition, Attempt: st.Attempt, Steps: st.Steps,
		Used: st.Budget.Used, Granted: st.Budget.Granted, Budget: budgetOf(run),
		AwaitingApproval: len(st.PendingApprovals) > 0,
	}
	for _, d := range st.Gates.Directives {
		s.Directives = append(s.Directives, string(d))
	}
	if f := st.Finalization; f != nil {
		s.Finalization = string(f.Reason) + ": " + f.Cause
	}
	for _, a := range st.PendingApprovals {
		p := Approval{ActionID: a.ActionID, Tool: a.Tool, Risk: a.Risk, Attempt: a.Attempt, Summary: a.Summary,
			Arguments: a.Arguments, ArgumentsBytes: a.ArgumentsBytes, ArgumentsSHA256: a.ArgumentsSHA256,
			ArgumentsTruncated: a.ArgumentsTruncated}
		if a.ExpiresAt != nil {
			p.ExpiresAt = a.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		s.PendingApprovals = append(s.PendingApprovals, p)
	}
	if p := st.SecurityPosture; p != nil {
		s.SecurityPosture = &SecurityPosture{Posture: p.Posture, Interceptor: p.Interceptor, ErrorRate: p.ErrorRate, Message: p.Message}
	}
	return s
}

func budgetOf(run *v1alpha1.ResearchRun) v1alpha1.Usage {
	b := run.Spec.Budget
	u := v1alpha1.Usage{ModelRequests: b.ModelRequests, ToolCalls: b.ToolCalls}
	if b.Tokens != nil {
		u.Tokens = *b.Tokens
	}
	return u
}

// Snapshot is the run's State as JSON, the STATE_SNAPSHOT of a new
// subscriber.
func Snapshot(run *v1alpha1.ResearchRun) json.RawMessage {
	b, _ := json.Marshal(StateOf(run))
	return b
}

// Checkpoint is what the events stored so far have told a subscriber about
// a run's status: the watcher's memory, rebuilt with Fold after a restart.
type Checkpoint struct {
	// State is the last published state, field by field (top-level JSON).
	State map[string]json.RawMessage `json:"state,omitempty"`
	// Started: RUN_STARTED was published. Finished: RUN_FINISHED or RUN_ERROR.
	Started  bool `json:"started,omitempty"`
	Finished bool `json:"finished,omitempty"`
	// Decisions is how many of spec.approvals got an approval-decided event.
	Decisions int `json:"decisions,omitempty"`
	// Seq is the run's seq of the last event folded in.
	Seq uint64 `json:"seq,omitempty"`
	// RunUID is the UID of the run the state is of: a run deleted and
	// created again under its name continues its stream as a new run.
	RunUID string `json:"runUID,omitempty"`
}

// Diff returns the events that bring a subscriber who has seen cp up to the
// run as it is now, in order. Fold each, once stored, into cp.
func Diff(cp Checkpoint, run *v1alpha1.ResearchRun) []stream.Event {
	if cp.RunUID != string(run.UID) {
		cp = Checkpoint{Seq: cp.Seq}
	}
	if run.Status.Phase == "" || cp.Finished {
		return nil
	}
	var evs []stream.Event
	thread := run.Namespace + "/" + run.Name
	state := StateOf(run)
	if !cp.Started {
		evs = append(evs,
			stream.Event{Type: stream.RunStarted, ThreadID: thread, RunID: string(run.UID)},
			stream.Event{Type: stream.StateSnapshot, Snapshot: mustJSON(state)})
	} else if patch := patchOf(cp.State, fields(state)); patch != nil {
		evs = append(evs, stream.Event{Type: stream.StateDelta, Patch: patch})
	}
	evs = append(evs, approvalsRequested(cp.State, state)...)
	for _, a := range run.Spec.Approvals[min(cp.Decisions, len(run.Spec.Approvals)):] {
		evs = append(evs, custom(EventApprovalDecided, map[string]any{
			"actionID": a.ActionID, "decision": a.Decision, "approver": a.Approver, "comment": a.Comment,
		}))
	}
	if run.Status.Phase == v1alpha1.PhaseTerminated {
		evs = append(evs, ended(run, thread))
	}
	for i := range evs {
		evs[i].Metadata = sourceMeta
	}
	return evs
}

func ended(run *v1alpha1.ResearchRun, thread string) stream.Event {
	st := run.Status
	if st.Settlement == v1alpha1.SettlementNone || st.Settlement == "" {
		return stream.Event{Type: stream.RunError, Message: st.Message, Code: string(st.Reason)}
	}
	ev := stream.Event{Type: stream.RunFinished, ThreadID: thread, RunID: string(run.UID),
		Result: mustJSON(map[string]any{"reason": st.Reason, "settlement": st.Settlement, "message": st.Message})}
	if st.Settlement == v1alpha1.SettlementComplete {
		ev.Outcome = json.RawMessage(`{"type":"success"}`)
	}
	return ev
}

// approvalsRequested announces each pending approval the last state did not
// have.
func approvalsRequested(prev map[string]json.RawMessage, now State) []stream.Event {
	var known []Approval
	if raw, ok := prev["pendingApprovals"]; ok {
		_ = json.Unmarshal(raw, &known)
	}
	var evs []stream.Event
	for _, a := range now.PendingApprovals {
		if !slices.ContainsFunc(known, func(k Approval) bool { return k.ActionID == a.ActionID }) {
			evs = append(evs, custom(EventApprovalRequested, a))
		}
	}
	return evs
}

// Fold applies one stored event to cp. Events of other sources (the
// gateway's) only move Seq.
func Fold(cp Checkpoint, ev stream.Event) Checkpoint {
	cp.Seq = max(cp.Seq, ev.Seq)
	if !FromStatus(ev) {
		return cp
	}
	switch ev.Type {
	case stream.RunStarted:
		cp = Checkpoint{Seq: cp.Seq, RunUID: ev.RunID, Started: true}
	case stream.StateSnapshot:
		cp.State = map[string]json.RawMessage{}
		_ = json.Unmarshal(ev.Snapshot, &cp.State)
	case stream.StateDelta:
		cp.State = applyPatch(cp.State, ev.Patch)
	case stream.Custom:
		if ev.Name == EventApprovalDecided {
			cp.Decisions++
		}
	case stream.RunFinished, stream.RunError:
		cp.Finished = true
	}
	return cp
}

// FromStatus reports whether ev was produced here.
func FromStatus(ev stream.Event) bool {
	var m struct {
		Source string `json:"source"`
	}
	return json.Unmarshal(ev.Metadata, &m) == nil && m.Source == Source
}

type op struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// patchOf is the JSON Patch of top-level fields from prev to next, in the
// order of State's fields; nil if nothing changed.
func patchOf(prev, next map[string]json.RawMessage) json.RawMessage {
	var ops []op
	for _, k := range stateKeys {
		p, had := prev[k]
		n, has := next[k]
		switch {
		case has && !had:
			ops = append(ops, op{Op: "add", Path: "/" + k, Value: n})
		case has && !bytes.Equal(p, n):
			ops = append(ops, op{Op: "replace", Path: "/" + k, Value: n})
		case had && !has:
			ops = append(ops, op{Op: "remove", Path: "/" + k})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return mustJSON(ops)
}

func applyPatch(state map[string]json.RawMessage, patch json.RawMessage) map[string]json.RawMessage {
	var ops []op
	if json.Unmarshal(patch, &ops) != nil {
		return state
	}
	if state == nil {
		state = map[string]json.RawMessage{}
	}
	for _, o := range ops {
		k := o.Path[min(1, len(o.Path)):]
		if o.Op == "remove" {
			delete(state, k)
		} else {
			state[k] = o.Value
		}
	}
	return state
}

// stateKeys are State's JSON field names, in order.
var stateKeys = []string{"phase", "reason", "settlement", "message", "queuePosition", "attempt", "steps",
	"used", "granted", "budget", "directives", "finalization", "awaitingApproval", "pendingApprovals", "securityPosture"}

func fields(s State) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(mustJSON(s), &m)
	return m
}

func custom(name string, value any) stream.Event {
	return stream.Event{Type: stream.Custom, Name: name, Value: mustJSON(value)}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs and maps are marshalled here
	}
	return b
}
