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

package kubectlplugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// WhyOptions name the run Why explains.
type WhyOptions struct {
	Namespace string
	Name      string
	// Now is the clock of relative times.
	Now time.Time
	// Color styles headings and verdicts (a terminal).
	Color bool
}

// Why explains a run's decision: phase, reason and message, the
// finalization, the gate or fact that decided it with its numbers, the
// gates and conditions, the ledger per attempt, the latest attempt's facts
// (its RunAttempt), directives, and pending approvals with the command
// that answers them.
func Why(ctx context.Context, w io.Writer, c client.Reader, o WhyOptions) error {
	var rr v1alpha1.ResearchRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &rr); err != nil {
		return err
	}
	attempts, err := runAttempts(ctx, c, &rr)
	if err != nil {
		return err
	}
	x := &explainer{w: w, rr: &rr, now: o.Now, s: style{on: o.Color}, attempts: attempts}
	for _, a := range attempts {
		if a.Spec.Attempt == rr.Status.Attempt {
			x.cur = a
		}
	}
	x.lease = readGatewayLease(ctx, c, x.cur)
	x.harness = harnessText(ctx, c, &rr, x.cur)
	x.header()
	x.decision()
	x.gates()
	x.conditions()
	x.ledger()
	x.attempt()
	x.directives()
	x.approvals()
	return nil
}

// runAttempts lists the run's RunAttempts (labelled with the run, and
// naming it in spec.runName), by attempt number.
func runAttempts(ctx context.Context, c client.Reader, rr *v1alpha1.ResearchRun) ([]*v1alpha1.RunAttempt, error) {
	var list v1alpha1.RunAttemptList
	if err := c.List(ctx, &list, client.InNamespace(rr.Namespace),
		client.MatchingLabels{v1alpha1.LabelRun: runpod.LabelValue(rr.Name)}); err != nil {
		return nil, err
	}
	var out []*v1alpha1.RunAttempt
	for i := range list.Items {
		if list.Items[i].Spec.RunName == rr.Name {
			out = append(out, &list.Items[i])
		}
	}
	if rr.Status.Attempt > 0 && !slices.ContainsFunc(out, func(a *v1alpha1.RunAttempt) bool {
		return a.Spec.Attempt == rr.Status.Attempt
	}) {
		// An attempt created without its labels still has its name.
		var ra v1alpha1.RunAttempt
		err := c.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: runpod.Name(rr.Name, rr.Status.Attempt)}, &ra)
		switch {
		case err == nil && ra.Spec.RunName == rr.Name:
			out = append(out, &ra)
		case err != nil && !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.RunAttempt) int { return cmp.Compare(a.Spec.Attempt, b.Spec.Attempt) })
	return out, nil
}

type explainer struct {
	w        io.Writer
	rr       *v1alpha1.ResearchRun
	cur      *v1alpha1.RunAttempt
	lease    *gatewayLease // the Lease cur's status.liveness names
	attempts []*v1alpha1.RunAttempt
	harness  string // the harness's result (harness.go)
	now      time.Time
	s        style
}

func (x *explainer) printf(format string, args ...any) { _, _ = fmt.Fprintf(x.w, format, args...) }

func (x *explainer) section(title string) { x.printf("\n%s\n", x.s.heading(title)) }

func (x *explainer) header() {
	rr, st := x.rr, x.rr.Status
	t := newTable(x.w, "")
	t.row("Run:", rr.Namespace+"/"+rr.Name)
	t.row("Session:", rr.Spec.SessionRef.Name)
	t.row("Phase:", x.s.outcome(st.Phase, st.Reason, dash(string(st.Phase))))
	if st.Reason != "" {
		reason := string(st.Reason)
		if st.Settlement != "" {
			reason += " (settlement " + string(st.Settlement) + ")"
		}
		t.row("Reason:", x.s.outcome(st.Phase, st.Reason, reason))
	}
	if st.Message != "" {
		t.row("Message:", st.Message)
	}
	if st.Phase == v1alpha1.PhaseQueued && st.QueuePosition > 0 {
		t.row("Queue:", fmt.Sprintf("position %d", st.QueuePosition))
	}
	if st.Attempt > 0 {
		t.row("Attempt:", fmt.Sprintf("%d of at most %d", st.Attempt, rr.Spec.Recovery.EffectiveMaxAttempts()))
	}
	if times := x.times(); times != "" {
		t.row("Times:", times)
	}
	t.flush()
}

func (x *explainer) times() string {
	st := x.rr.Status
	var parts []string
	for _, t := range []struct {
		what string
		at   *metav1.Time
	}{
		{"queued", st.QueuedTime}, {"started", st.StartTime},
		{"finalizing", st.FinalizingTime}, {"ended", st.CompletionTime},
	} {
		if t.at != nil && !t.at.IsZero() {
			parts = append(parts, t.what+" "+ago(t.at, x.now))
		}
	}
	return strings.Join(parts, ", ")
}

// gateOf is the gate behind a gate reason ("" for the other reasons).
func gateOf(r v1alpha1.Reason) v1alpha1.Gate {
	switch r {
	case v1alpha1.ReasonBudgetExhausted:
		return v1alpha1.GateBudget
	case v1alpha1.ReasonDeadlineExceeded:
		return v1alpha1.GateDeadline
	case v1alpha1.ReasonStepLimit:
		return v1alpha1.GateSteps
	case v1alpha1.ReasonRepeatedCall:
		return v1alpha1.GateSameCall
	case v1alpha1.ReasonNoProgress:
		return v1alpha1.GateNoProgress
	}
	return ""
}

// deciding is the reason that decided the run's course: the
// finalization's, else the run's.
func (x *explainer) deciding() v1alpha1.Reason {
	if f := x.rr.Status.Finalization; f != nil {
		return f.Reason
	}
	return x.rr.Status.Reason
}

func (x *explainer) decision() {
	rr, st := x.rr, x.rr.Status
	x.section("Decision")
	fin := st.Finalization
	switch st.Phase {
	case "", v1alpha1.PhasePending:
		x.printf("  Pending: not yet in its session's queue (no attempt started).\n")
		return
	case v1alpha1.PhaseQueued:
		x.printf("  Queued in session %s at position %d: another run of the session is active.\n",
			rr.Spec.SessionRef.Name, st.QueuePosition)
		return
	case v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering:
		x.printf("  %s: no gate has tripped and nothing ended the run.\n", st.Phase)
		if n := len(st.PendingApprovals); n > 0 {
			x.printf("  %s\n", x.s.warn(fmt.Sprintf("Waiting for a decision on %s (see Pending approvals): "+
				"a waiting call counts toward no gate, but the deadline keeps running.", count(int64(n), "action"))))
		}
		if st.Phase == v1alpha1.PhaseRecovering {
			x.printf("  The current attempt failed and is being replaced (same run, same ledger).\n")
		}
		return
	}
	if fin != nil {
		verb := "Finalized"
		if st.Phase == v1alpha1.PhaseFinalizing {
			verb = "Finalizing"
		}
		if fin.Reason == v1alpha1.ReasonCompleted {
			x.printf("  %s from the output reserve because the agent finished:\n", verb)
		} else {
			x.printf("  %s from the output reserve because of %s:\n", verb, x.s.bad(string(fin.Reason)))
		}
		x.printf("    %s\n", fin.Cause)
		x.printf("  Reserve given: %s.\n", usage(fin.Reserve))
	}
	if st.Phase == v1alpha1.PhaseTerminated {
		switch {
		case fin != nil && st.Reason != fin.Reason:
			x.printf("  Then ended with %s instead (settlement %s).\n", st.Reason, dash(string(st.Settlement)))
		case fin != nil:
			x.printf("  Terminated with %s, settlement %s.\n", st.Reason, dash(string(st.Settlement)))
		default:
			x.printf("  Terminated with %s without finalizing, settlement %s.\n", st.Reason, dash(string(st.Settlement)))
		}
	}
	for _, line := range x.decidedBy() {
		x.printf("  %s\n", line)
	}
	if st.Reason != "" && fin != nil && st.Reason != fin.Reason {
		x.printf("  Ended by: %s\n", strings.Join(x.factOf(st.Reason), " "))
	}
}

// decidedBy names the gate or fact behind the deciding reason, with its
// numbers.
func (x *explainer) decidedBy() []string {
	r := x.deciding()
	lines := x.factOf(r)
	if len(lines) == 0 {
		return nil
	}
	if g := gateOf(r); g != "" {
		lines[0] = fmt.Sprintf("Gate tripped: %s — %s", g, lines[0])
	} else {
		lines[0] = "Decided by: " + lines[0]
	}
	return lines
}

// factOf explains reason r from the run's status and its attempts' facts.
func (x *explainer) factOf(r v1alpha1.Reason) []string {
	rr, st := x.rr, x.rr.Status
	switch r {
	case v1alpha1.ReasonBudgetExhausted:
		var out []string
		for _, d := range x.budgetRows() {
			if d.used >= d.limit {
				out = append(out, fmt.Sprintf("%s reached the working allowance of %s (budget %s minus reserve %s); "+
					"%s used in all, the reserve included.", d.unit, d.show(d.limit), d.show(d.budget), d.show(d.reserve),
					d.show(d.used)))
			}
		}
		if len(out) == 0 {
			out = []string{"the working allowance (budget minus output reserve) was used up."}
		}
		return out
	case v1alpha1.ReasonStepLimit:
		return []string{fmt.Sprintf("%d steps over all attempts reached maxSteps %d.", st.Gates.Steps,
			rr.Spec.Gates.EffectiveMaxSteps())}
	case v1alpha1.ReasonRepeatedCall:
		line := fmt.Sprintf("one call was repeated %d times; sameCallLimit is %d.", st.Gates.MaxSameCall,
			rr.Spec.Gates.SameCallLimit)
		if top := x.topCall(); top != nil {
			line += fmt.Sprintf(" The call: %s (fingerprint %s), %d times on attempt %d.",
				top.Tool, top.Fingerprint, top.Count, x.cur.Spec.Attempt)
		}
		return []string{line}
	case v1alpha1.ReasonNoProgress:
		line := fmt.Sprintf("%d steps without progress on the current attempt reached noProgressLimit %d.",
			st.Gates.StepsWithoutProgress, rr.Spec.Gates.NoProgressLimit)
		if x.cur != nil {
			line += fmt.Sprintf(" Last progress at step %d of %d.", x.cur.Status.LastProgressStep, x.cur.Status.Steps)
		}
		return []string{line}
	case v1alpha1.ReasonDeadlineExceeded:
		elapsed, until := x.elapsed()
		return []string{fmt.Sprintf("%s from start to %s passed the deadline of %s (finalizationGrace %s).",
			duration.HumanDuration(elapsed), until, duration.HumanDuration(rr.Spec.Budget.EffectiveDeadline()),
			durationOf(rr.Spec.Budget.FinalizationGrace))}
	case v1alpha1.ReasonCompleted:
		if x.cur != nil && x.cur.Status.FinishProposed {
			return []string{fmt.Sprintf("attempt %d proposed finish and its publication settled %s.",
				x.cur.Spec.Attempt, dash(string(st.Settlement)))}
		}
		return []string{"the agent finished (its pod exited 0, an implicit finish) and its publication settled " +
			dash(string(st.Settlement)) + "."}
	case v1alpha1.ReasonCancelled:
		line := "spec.stop is Cancel: the run ended at once, and nothing more was spent."
		if cause := rr.Annotations[v1alpha1.AnnotationStopCause]; cause != "" {
			line = fmt.Sprintf("spec.stop is Cancel, set by the operator because %s.", cause)
		}
		return []string{line}
	case v1alpha1.ReasonFinalizeRequested:
		return []string{"spec.stop is Finalize: the run wrapped up from its reserve at the user's request."}
	case v1alpha1.ReasonUnsafeToRecover:
		return []string{"an attempt failed with a side effect in flight that has no idempotency key: " +
			"it is never replayed. " + x.unsafeEffects()}
	case v1alpha1.ReasonRecoveryExhausted:
		return []string{fmt.Sprintf("attempts failed %d times; recovery.maxAttempts is %d.",
			len(x.attempts), rr.Spec.Recovery.EffectiveMaxAttempts())}
	case v1alpha1.ReasonAgentFailed:
		if f := x.escalated(); f != nil {
			return []string{fmt.Sprintf("attempt %d escalated a fault that is not retryable: %s/%s: %s",
				x.cur.Spec.Attempt, f.Scope, f.Kind, f.LastMessage)}
		}
		return []string{"the attempt failed in a way a new attempt cannot fix (see the message)."}
	case v1alpha1.ReasonPolicyViolation:
		line := "the attempt reported usage above its grant, or a counter that went backwards."
		if x.cur != nil {
			g := x.cur.Spec.Grant
			line += fmt.Sprintf(" Attempt %d: usage %s; grant %s.", x.cur.Spec.Attempt, usage(x.cur.Status.Usage),
				usage(v1alpha1.Usage{ModelRequests: g.ModelRequests, ToolCalls: g.ToolCalls, Tokens: deref(g.Tokens)}))
		}
		return []string{line}
	case v1alpha1.ReasonQueueFull, v1alpha1.ReasonQueueTimeout:
		return []string{fmt.Sprintf("the queue of session %s: %s", rr.Spec.SessionRef.Name, dash(st.Message))}
	}
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func durationOf(d *metav1.Duration) string {
	if d == nil {
		return "-"
	}
	return duration.HumanDuration(d.Duration)
}

// elapsed is the run's time from startTime to its finalization, its end,
// or now, and which of those it is.
func (x *explainer) elapsed() (time.Duration, string) {
	st := x.rr.Status
	if st.StartTime == nil {
		return 0, "now"
	}
	switch {
	case st.FinalizingTime != nil:
		return st.FinalizingTime.Sub(st.StartTime.Time), "finalizing"
	case st.CompletionTime != nil:
		return st.CompletionTime.Sub(st.StartTime.Time), "the end"
	}
	return x.now.Sub(st.StartTime.Time), "now"
}

func (x *explainer) topCall() *v1alpha1.CallCount {
	if x.cur == nil {
		return nil
	}
	var top *v1alpha1.CallCount
	for i := range x.cur.Status.Calls {
		if c := &x.cur.Status.Calls[i]; top == nil || c.Count > top.Count {
			top = c
		}
	}
	return top
}

func (x *explainer) escalated() *v1alpha1.Fault {
	if x.cur == nil {
		return nil
	}
	for i := range x.cur.Status.Faults {
		if f := &x.cur.Status.Faults[i]; f.Escalated && !f.Retryable {
			return f
		}
	}
	return nil
}

func (x *explainer) unsafeEffects() string {
	var ids []string
	for _, a := range x.attempts {
		for _, e := range a.Status.InFlight {
			if e.IdempotencyKey == "" {
				ids = append(ids, fmt.Sprintf("%s (%s, attempt %d)", e.ID, e.Tool, a.Spec.Attempt))
			}
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return "In flight: " + strings.Join(ids, ", ") + "."
}

// budgetRow is one budget dimension: used against the working allowance.
type budgetRow struct {
	unit                         string
	used, limit, budget, reserve int64
	money                        bool // the counts are micro-units of money (v1alpha1.Money)
}

// show is a count of the row's unit.
func (d budgetRow) show(v int64) string {
	if d.money {
		return v1alpha1.Money(v).String()
	}
	return itoa(v)
}

func (x *explainer) budgetRows() []budgetRow {
	b, used := x.rr.Spec.Budget, x.rr.Status.Budget.Used
	rows := []budgetRow{
		{"model requests", used.ModelRequests, b.ModelRequests - b.OutputReserve.ModelRequests, b.ModelRequests,
			b.OutputReserve.ModelRequests, false},
		{"tool calls", used.ToolCalls, b.ToolCalls - b.OutputReserve.ToolCalls, b.ToolCalls, b.OutputReserve.ToolCalls, false},
	}
	if b.Tokens != nil {
		rows = append(rows, budgetRow{"tokens", used.Tokens, *b.Tokens - b.OutputReserve.Tokens, *b.Tokens,
			b.OutputReserve.Tokens, false})
	}
	if b.Cost != nil {
		rows = append(rows, budgetRow{"cost", int64(used.Cost), int64(*b.Cost - b.OutputReserve.Cost), int64(*b.Cost),
			int64(b.OutputReserve.Cost), true})
	}
	return rows
}

func (x *explainer) gates() {
	rr, st := x.rr, x.rr.Status
	decided := gateOf(x.deciding())
	directives := map[v1alpha1.Gate][]string{}
	if x.cur != nil {
		for _, d := range x.cur.Spec.Directives {
			directives[d.Gate] = append(directives[d.Gate], string(d.Type))
		}
	}
	state := func(g v1alpha1.Gate, reached bool) string {
		switch {
		case reached && g == decided:
			return x.s.bad("TRIPPED")
		case reached:
			return "reached"
		}
		return strings.Join(directives[g], ", ")
	}
	x.section("Gates")
	t := newTable(x.w, "  ", "GATE", "USED", "LIMIT", "NOTE", "STATE")
	for _, d := range x.budgetRows() {
		t.row("Budget: "+d.unit, d.show(d.used), d.show(d.limit),
			fmt.Sprintf("budget %s minus reserve %s", d.show(d.budget), d.show(d.reserve)),
			state(v1alpha1.GateBudget, d.used >= d.limit))
	}
	g := rr.Spec.Gates
	gate := func(name v1alpha1.Gate, used int64, limit int32, note string) {
		t.row(string(name), itoa(used), limitCell(limit), note, state(name, limit > 0 && used >= int64(limit)))
	}
	gate(v1alpha1.GateSteps, st.Gates.Steps, g.EffectiveMaxSteps(), "steps over all attempts")
	gate(v1alpha1.GateSameCall, st.Gates.MaxSameCall, g.SameCallLimit, "highest repeat of one call, current attempt")
	gate(v1alpha1.GateNoProgress, st.Gates.StepsWithoutProgress, g.NoProgressLimit,
		"steps without progress, current attempt")
	// A run admitted without the webhook has no deadline, maxSteps or
	// maxAttempts in its spec; it runs with the built-in ones.
	deadline := rr.Spec.Budget.EffectiveDeadline()
	if st.StartTime != nil {
		elapsed, until := x.elapsed()
		t.row(string(v1alpha1.GateDeadline), duration.HumanDuration(elapsed), duration.HumanDuration(deadline),
			"from start to "+until, state(v1alpha1.GateDeadline, elapsed >= deadline))
	} else {
		t.row(string(v1alpha1.GateDeadline), "-", duration.HumanDuration(deadline), "not started", "")
	}
	t.flush()
	if st.Gates.LocalFaults > 0 {
		x.printf("  Local faults: %d (handled by the agent; they change no phase).\n", st.Gates.LocalFaults)
	}
}

func limitCell(n int32) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func (x *explainer) conditions() {
	conds := x.rr.Status.Conditions
	if len(conds) == 0 {
		return
	}
	x.section("Conditions")
	t := newTable(x.w, "  ", "TYPE", "STATUS", "REASON", "SINCE", "MESSAGE")
	for _, c := range conds {
		t.row(c.Type, string(c.Status), c.Reason, ago(&c.LastTransitionTime, x.now), c.Message)
	}
	t.flush()
}

func (x *explainer) ledger() {
	st := x.rr.Status
	if len(st.Ledger) == 0 {
		return
	}
	x.section("Ledger")
	t := newTable(x.w, "  ", "ATTEMPT", "MODEL REQUESTS", "TOOL CALLS", "TOKENS", "STEPS")
	for _, l := range st.Ledger {
		t.row(fmt.Sprint(l.Attempt), itoa(l.Used.ModelRequests), itoa(l.Used.ToolCalls), itoa(l.Used.Tokens),
			itoa(l.Steps))
	}
	u := st.Budget.Used
	t.row("total", itoa(u.ModelRequests), itoa(u.ToolCalls), itoa(u.Tokens), itoa(st.Steps))
	t.flush()
}

func (x *explainer) attempt() {
	st := x.rr.Status
	if st.Attempt == 0 {
		return
	}
	name := runpod.Name(x.rr.Name, st.Attempt)
	if x.cur == nil {
		x.section(fmt.Sprintf("Attempt %d", st.Attempt))
		x.printf("  RunAttempt %s not found.\n", name)
		return
	}
	a := x.cur
	x.section(fmt.Sprintf("Attempt %d (RunAttempt %s)", a.Spec.Attempt, a.Name))
	t := newTable(x.w, "  ")
	t.row("Pod:", dash(a.Spec.PodName))
	t.row("Run phase:", dash(string(a.Spec.RunPhase)))
	t.row("Grant:", grantText(a.Spec.Grant))
	t.row("Usage:", usage(a.Status.Usage))
	t.row("Steps:", fmt.Sprintf("%d (last progress at step %d)", a.Status.Steps, a.Status.LastProgressStep))
	t.row("Finish:", map[bool]string{true: "proposed", false: "not proposed"}[a.Status.FinishProposed])
	t.row("Publication:", publicationText(a.Status.Publication))
	if x.harness != "" {
		t.row("Harness:", x.harness)
	}
	if a.Status.Liveness != nil {
		t.row("Liveness:", livenessText(a, x.lease, heartbeatTimeout(x.rr), x.now))
	} else {
		t.row("Heartbeat:", ago(a.Status.HeartbeatTime, x.now))
	}
	if len(a.Status.AwaitingApproval) > 0 {
		t.row("Awaiting:", strings.Join(v1alpha1.ActionIDs(a.Status.AwaitingApproval), ", ")+" (see Pending approvals)")
	}
	if names := agentEnforced(a.Spec.Policy.ResolvedChain); len(names) > 0 {
		t.row("Agent-only interceptors:", strings.Join(names, ", ")+
			" (enforcement: Agent: the gateway does not run them; they bind this run only if its agent runs them itself)")
	}
	t.flush()
	x.faults(a)
	x.inFlight(a)
}

// agentEnforced names the chain's interceptors marked enforcement: Agent.
func agentEnforced(resolved []v1alpha1.ResolvedInterceptor) []string {
	var names []string
	for _, e := range resolved {
		if e.Enforcement == v1alpha1.EnforcementAgent {
			names = append(names, e.Name)
		}
	}
	return names
}

func grantText(g v1alpha1.Grant) string {
	s := usage(v1alpha1.Usage{ModelRequests: g.ModelRequests, ToolCalls: g.ToolCalls, Tokens: deref(g.Tokens)})
	if g.FinalizeOnly {
		s += ", finalize only"
	}
	if g.Reserve != nil {
		s += " (reserve " + usage(*g.Reserve) + ")"
	}
	return s
}

func publicationText(p v1alpha1.Publication) string {
	if p == (v1alpha1.Publication{}) {
		return "nothing published"
	}
	s := fmt.Sprintf("%d of %d blocks committed", p.BlocksCommitted, p.BlocksPlanned)
	if p.Settled {
		s += ", settled " + string(p.Settlement)
	} else {
		s += ", not settled"
	}
	if p.Location != "" {
		s += ", at " + p.Location
	}
	return s
}

func (x *explainer) faults(a *v1alpha1.RunAttempt) {
	if len(a.Status.Faults) == 0 {
		return
	}
	x.printf("\n  Faults\n")
	t := newTable(x.w, "    ", "SCOPE", "KIND", "COUNT", "RETRYABLE", "ESCALATED", "LAST MESSAGE")
	for _, f := range a.Status.Faults {
		t.row(string(f.Scope), f.Kind, itoa(f.Count), yesNo(f.Retryable), yesNo(f.Escalated), dash(f.LastMessage))
	}
	t.flush()
}

func (x *explainer) inFlight(a *v1alpha1.RunAttempt) {
	if len(a.Status.InFlight) == 0 {
		return
	}
	x.printf("\n  In-flight effects\n")
	t := newTable(x.w, "    ", "ID", "TOOL", "EFFECT", "IDEMPOTENCY KEY", "STARTED", "OUTCOME", "MESSAGE")
	var unknown []string
	for _, e := range a.Status.InFlight {
		outcome := "under way"
		if e.Outcome != "" {
			outcome = string(e.Outcome)
		}
		if e.Outcome == v1alpha1.OutcomeUnknown {
			unknown = append(unknown, e.ID+" ("+e.Tool+")")
		}
		t.row(e.ID, e.Tool, string(e.Effect), dash(e.IdempotencyKey), ago(e.StartedAt, x.now), outcome, dash(e.Message))
	}
	t.flush()
	if len(unknown) > 0 {
		x.printf("  %s\n", x.s.bad(fmt.Sprintf("! Unknown outcome: %s may or may not have taken effect. "+
			"The gateway never dispatches a non-idempotent call with that fingerprint again; "+
			"check the tool's side before repeating it by hand.", strings.Join(unknown, ", "))))
	}
}

func (x *explainer) directives() {
	var ds []v1alpha1.Directive
	if x.cur != nil {
		ds = x.cur.Spec.Directives
	}
	if len(ds) == 0 {
		for _, d := range x.rr.Status.Gates.Directives {
			ds = append(ds, v1alpha1.Directive{Type: d})
		}
	}
	if len(ds) == 0 {
		return
	}
	x.section("Directives")
	t := newTable(x.w, "  ", "TYPE", "GATE", "MESSAGE")
	for _, d := range ds {
		t.row(string(d.Type), dash(string(d.Gate)), dash(d.Message))
	}
	t.flush()
}

func (x *explainer) approvals() {
	rr := x.rr
	pending := rr.Status.PendingApprovals
	if len(pending) > 0 {
		x.section("Pending approvals")
		t := newTable(x.w, "  ", "ACTION", "TOOL", "RISK", "ATTEMPT", "REQUESTED", "EXPIRES")
		for _, p := range pending {
			t.row(p.ActionID, p.Tool, dash(string(p.Risk)), fmt.Sprint(p.Attempt), ago(p.RequestedAt, x.now),
				ago(p.ExpiresAt, x.now))
		}
		t.flush()
		for _, p := range pending {
			x.printf("\n  %s\n", p.ActionID)
			approve := fmt.Sprintf("kubectl agentrun approve -n %s %s %s --comment \"…\"", rr.Namespace, rr.Name, p.ActionID)
			switch {
			case p.ArgumentsTruncated:
				x.printf("    arguments (redacted): TRUNCATED, showing %d of %d bytes; the full arguments' SHA-256 is %s\n",
					len(p.Arguments), p.ArgumentsBytes, p.ArgumentsSHA256)
				x.printf("    nobody can read them in full here: approve only after reading them where they were made, naming their hash\n")
				approve += " --arguments-sha256 " + p.ArgumentsSHA256
			case p.Arguments != "" || p.ArgumentsSHA256 != "":
				x.printf("    arguments (redacted, in full, %d bytes, SHA-256 %s):\n", p.ArgumentsBytes, p.ArgumentsSHA256)
			default:
				x.printf("    arguments: not shown by this gateway; summary (redacted, possibly cut): %s\n", dash(p.Summary))
			}
			if p.Arguments != "" {
				for line := range strings.SplitSeq(p.Arguments, "\n") {
					x.printf("      %s\n", line)
				}
			}
			x.printf("    approve: %s\n", approve)
			x.printf("    deny:    kubectl agentrun deny -n %s %s %s --reason \"…\"\n", rr.Namespace, rr.Name, p.ActionID)
		}
	}
	if len(rr.Spec.Approvals) > 0 {
		x.section("Decisions (spec.approvals)")
		t := newTable(x.w, "  ", "#", "ACTION", "DECISION", "SCOPE", "APPROVER", "TIME", "COMMENT")
		for i, a := range rr.Spec.Approvals {
			scope := string(a.Scope)
			if a.Decision != v1alpha1.DecisionApprove {
				scope = ""
			}
			t.row(fmt.Sprint(i), a.ActionID, string(a.Decision), dash(scope), dash(a.Approver), ago(a.Time, x.now), dash(a.Comment))
		}
		t.flush()
	}
}

func (p *plugin) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "why RUN",
		Short:             "Explain a run's decision: the gate or fact behind its phase, with the numbers",
		Example:           "  kubectl agentrun why compare-licences",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: p.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			return Why(cmd.Context(), p.Streams.Out, c,
				WhyOptions{Namespace: ns, Name: args[0], Now: p.now(), Color: p.color()})
		},
	}
}
