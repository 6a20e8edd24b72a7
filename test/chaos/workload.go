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

package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
)

// Kind is one kind of scripted run of the mixed workload.
type Kind string

// The kinds of the mixed workload, in the order runs are made (run i is of
// Kinds[i % 6]).
const (
	// KindComplete opens a ticket, takes notes, publishes two sections and finishes: Completed/Complete.
	KindComplete Kind = "complete"
	// KindBudget never finishes: its working budget runs out, it finalizes
	// one section from the reserve: BudgetExhausted/Partial. The request that
	// uses the working budget up asks for no tool call: a tool call of that
	// turn would race the operator's Finalizing (which refuses research), so
	// the baseline would depend on how fast the operator reacts.
	KindBudget Kind = "budget"
	// KindCrash dies (exit 137) on attempt 1 with nothing in flight; attempt
	// 2 completes: Completed/Complete with two attempts.
	KindCrash Kind = "crash"
	// KindCancel waits for the approval of its High-risk publish; the driver
	// cancels it instead: Cancelled/None.
	KindCancel Kind = "cancel"
	// KindUnknown calls a non-idempotent tool that never answers (its outcome
	// is Unknown), then dies: UnsafeToRecover/None, one attempt.
	KindUnknown Kind = "unknown"
	// KindApproval waits for the approval of its High-risk publish; the
	// driver approves it: Completed/Complete.
	KindApproval Kind = "approval"
)

// Kinds lists the workload's kinds.
var Kinds = []Kind{KindComplete, KindBudget, KindCrash, KindCancel, KindUnknown, KindApproval}

// Policies of a scenario's namespace: publishing is auto-approved (Medium
// risk) under PolicyAuto and confirmed (High risk) under PolicyHigh.
const (
	PolicyAuto = "auto"
	PolicyHigh = "high"
)

func (k Kind) policy() string {
	if k == KindCancel || k == KindApproval {
		return PolicyHigh
	}
	return PolicyAuto
}

// ticketTitle is the title of the run's ticket.create (or ticket.hang) call:
// unique per run, so the tool server's record shows a call dispatched twice.
func ticketTitle(ns, run string) string { return ns + "/" + run }

// script returns the scripted provider's script of a run of kind k
// (docs/script-format.md).
func (k Kind) script(ns, run string) string {
	title := ticketTitle(ns, run)
	switch k {
	case KindComplete:
		return fmt.Sprintf(`plan: [Overview, Details]
turns:
- tools:
  - {name: ticket.create, args: {title: %q}}
  - {name: notes.write, args: {section: Overview, text: "o1"}}
- tools:
  - {name: notes.write, args: {section: Details, text: "d1"}}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Overview."}}
  - {name: report.publish, args: {section: Details, content: "Details."}}
- finish: true
`, title)
	case KindBudget:
		return fmt.Sprintf(`plan: [Alpha, Beta, Gamma]
turns:
- tools: [{name: ticket.create, args: {title: %q}}]
- tools: [{name: notes.write, args: {section: Beta, text: "b1"}}]
- say: "Weighing Gamma."
- tools: [{name: notes.write, args: {section: Alpha, text: "a2"}}]
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Alpha, content: "Alpha, from the reserve."}}]
`, title)
	case KindCrash:
		return `plan: [Overview, Details]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: notes.write, args: {section: Details, text: "d1"}}]
- crash: {exitCode: 137, onAttempt: 1}
- tools:
  - {name: report.publish, args: {section: Overview, content: "Overview."}}
  - {name: report.publish, args: {section: Details, content: "Details."}}
- finish: true
`
	case KindUnknown:
		return fmt.Sprintf(`plan: [Overview]
turns:
- tools: [{name: notes.write, args: {section: Overview, text: "o1"}}]
- tools: [{name: ticket.hang, args: {title: %q}}]
- tools:
  - {name: report.publish, args: {section: Overview, content: "Overview."}, crash: {exitCode: 137, onAttempt: 1}}
- finish: true
`, title)
	default: // KindCancel, KindApproval
		return fmt.Sprintf(`plan: [Overview]
turns:
- tools:
  - {name: ticket.create, args: {title: %q}}
  - {name: notes.write, args: {section: Overview, text: "o1"}}
- tools: [{name: report.publish, args: {section: Overview, content: "Approved overview."}}]
- finish: true
`, title)
	}
}

func (k Kind) budget() v1alpha1.Budget {
	b := v1alpha1.Budget{
		ModelRequests: 20, ToolCalls: 20,
		OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
		Deadline:      &metav1.Duration{Duration: 15 * time.Minute},
	}
	if k == KindBudget {
		b.ModelRequests, b.OutputReserve = 5, v1alpha1.OutputReserve{ModelRequests: 1, ToolCalls: 1}
	}
	return b
}

// ToolsFakeConfig is the tool server's --fake-config: ticket.create answers
// at once, ticket.hang never (the gateway's timeout leaves it Unknown).
const ToolsFakeConfig = `tools:
- name: ticket.create
  inputSchema: {type: object, properties: {title: {type: string}}, required: [title]}
- name: ticket.hang
  inputSchema: {type: object, properties: {title: {type: string}}, required: [title]}
  behavior: {hang: true}
`

// Env is what the workload runs on.
type Env struct {
	St *stack.Stack
	// Image is the attempt pods' image (the local node maps it to the
	// reference agent).
	Image string
	// AgentArgs are the reference agent's arguments.
	AgentArgs []string
	// Sessions of each policy in a scenario's namespace: the workload's
	// parallelism (runs of one session are serial).
	SessionsAuto, SessionsHigh int
	Out                        io.Writer
}

func (e *Env) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(e.Out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// World is one scenario's namespace: two policies, the sessions, the runs
// made so far and the checker watching them.
type World struct {
	env     *Env
	NS      string
	Checker *Checker

	mu       sync.Mutex
	kinds    map[string]Kind   // run → kind
	session  map[string]string // run → session
	created  []string
	acted    map[string]bool
	sessions map[string][]string // policy → sessions
}

// NewWorld creates namespace ns with the policies and sessions, and starts
// the checker.
func NewWorld(ctx context.Context, env *Env, ns string) (*World, error) {
	w := &World{env: env, NS: ns, kinds: map[string]Kind{}, session: map[string]string{},
		acted: map[string]bool{}, sessions: map[string][]string{}}
	c := env.St.Client
	if err := retry(ctx, func() error {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return nil, err
	}
	for _, p := range []string{PolicyAuto, PolicyHigh} {
		pol := policy(ns, p, env.St.ToolsURL, env.St.UpstreamURL)
		if err := retry(ctx, func() error { return createIgnoreExists(ctx, c, pol.DeepCopy()) }); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p, err)
		}
	}
	add := func(p, prefix string, n int) error {
		for i := range n {
			name := fmt.Sprintf("%s%d", prefix, i)
			s := &v1alpha1.Session{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: v1alpha1.SessionSpec{
					PolicyRef: v1alpha1.LocalObjectReference{Name: p}, Mode: v1alpha1.ModeAuto, ModeChangeReason: "chaos",
				},
			}
			if err := retry(ctx, func() error { return createIgnoreExists(ctx, c, s.DeepCopy()) }); err != nil {
				return fmt.Errorf("session %s: %w", name, err)
			}
			w.sessions[p] = append(w.sessions[p], name)
		}
		return nil
	}
	if err := add(PolicyAuto, "a", env.SessionsAuto); err != nil {
		return nil, err
	}
	if err := add(PolicyHigh, "h", env.SessionsHigh); err != nil {
		return nil, err
	}
	w.Checker = NewChecker(c, ns)
	w.Checker.Start(ctx)
	return w, nil
}

// policy is the interceptor chain of config/samples with the workload's tool
// catalogue: notes.write, report.publish (Medium and auto-approved under
// PolicyAuto, High under PolicyHigh), ticket.create and ticket.hang on the
// tool server (External, not idempotent, 2 s timeout).
func policy(ns, name, toolsURL, upstreamURL string) *v1alpha1.RuntimePolicy {
	publish := v1alpha1.Tool{Name: "report.publish", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal}
	auto := []string{"notes.write", "report.publish", "ticket.create", "ticket.hang"}
	if name == PolicyHigh {
		publish.Risk = v1alpha1.RiskHigh
		auto = []string{"notes.write", "ticket.create", "ticket.hang"}
	}
	return &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RuntimePolicySpec{
			Interceptors: []v1alpha1.Interceptor{
				{Name: "auth", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleAuthentication, Phase: v1alpha1.InterceptorPre,
					Priority: 10, OnError: v1alpha1.PostureDeny, Veto: new(true)},
				{Name: "rate_limit", Class: v1alpha1.ClassResource, Role: v1alpha1.RoleIdentityConsumer, Phase: v1alpha1.InterceptorPre,
					Priority: 20, OnError: v1alpha1.PostureDeny, Veto: new(true), Requires: []string{"auth"}},
				{Name: "redact", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleRedaction, Phase: v1alpha1.InterceptorPost,
					Priority: 50, OnError: v1alpha1.PostureDeny},
				{Name: "audit", Class: v1alpha1.ClassObservability, Role: v1alpha1.RoleAudit, Phase: v1alpha1.InterceptorPost,
					Priority: 90, OnError: v1alpha1.PostureAllow, Buffered: true, Requires: []string{"redact"}},
			},
			ToolServers: []v1alpha1.ToolServer{{Name: "tracker", URL: toolsURL, Timeout: &metav1.Duration{Duration: 2 * time.Second}}},
			Tools: []v1alpha1.Tool{
				{Name: "notes.write", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite, Idempotent: true},
				publish,
				{Name: "ticket.create", Server: "tracker", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal},
				{Name: "ticket.hang", Server: "tracker", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal},
			},
			AutoApprove: auto,
			MaxMode:     v1alpha1.ModeFull,
			Models:      []v1alpha1.Model{{Name: "scripted", BaseURL: upstreamURL}},
		},
	}
}

func createIgnoreExists(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// retry calls f until it succeeds or ctx ends, 250 ms apart: the API server
// or the webhooks may be down while a fault lasts.
func retry(ctx context.Context, f func() error) error {
	var err error
	for {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Create makes run i of the workload (kind Kinds[i%6]) in the session of its
// policy with the fewest unfinished runs, if that session has fewer than
// perSession; it returns "" when every session of that policy is full.
func (w *World) Create(ctx context.Context, i, perSession int) (string, error) {
	kind := Kinds[i%len(Kinds)]
	pol := kind.policy()
	best, bestN := "", perSession
	for _, s := range w.sessions[pol] {
		if n := w.unfinished(s); n < bestN {
			best, bestN = s, n
		}
	}
	if best == "" {
		return "", nil
	}
	name := fmt.Sprintf("%s-%03d", kind, i)
	c := w.env.St.Client
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name + "-script"},
		Data:       map[string]string{"script.yaml": kind.script(w.NS, name)},
	}
	if err := retry(ctx, func() error { return createIgnoreExists(ctx, c, cm.DeepCopy()) }); err != nil {
		return "", err
	}
	env := []corev1.EnvVar{{Name: "AGENTRUN_SCRIPT", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, Key: "script.yaml"}}}}
	run := &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name, Labels: map[string]string{"chaos.agentrun.dev/kind": string(kind)}},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: best},
			Goal:       "chaos workload: " + string(kind),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: w.env.Image, Args: w.env.AgentArgs, Env: env}},
			}},
			Budget:   kind.budget(),
			Recovery: v1alpha1.Recovery{MaxAttempts: 3, Backoff: &metav1.Duration{}},
		},
	}
	w.mu.Lock()
	w.kinds[name], w.session[name] = kind, best
	w.created = append(w.created, name)
	w.mu.Unlock()
	if err := retry(ctx, func() error { return createIgnoreExists(ctx, c, run.DeepCopy()) }); err != nil {
		return "", err
	}
	return name, nil
}

// unfinished counts the runs of session s made and not yet seen Terminated.
func (w *World) unfinished(s string) int {
	w.mu.Lock()
	names := make([]string, 0, len(w.created))
	for _, n := range w.created {
		if w.session[n] == s {
			names = append(names, n)
		}
	}
	w.mu.Unlock()
	n := 0
	for _, name := range names {
		if !w.Checker.Terminated(name) {
			n++
		}
	}
	return n
}

// Created returns the runs made so far and their kinds.
func (w *World) Created() ([]string, map[string]Kind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kinds := make(map[string]Kind, len(w.kinds))
	maps.Copy(kinds, w.kinds)
	return append([]string(nil), w.created...), kinds
}

// Act answers the runs that wait for an approval, as their owner would:
// an approval run gets each action it asks for approved (the one its script
// publishes, and a finalization's publish after a fault lost that one),
// a cancel run is cancelled at its first. An approval is one-shot and
// answers one request: a request asked again (by a new attempt) is answered
// again. Each answer is retried until it lands (the webhooks may be down) or
// the run ends.
func (w *World) Act(ctx context.Context) {
	for run, req := range w.Checker.Awaiting() {
		w.mu.Lock()
		kind := w.kinds[run]
		key := run + "/" + req.ActionID + "/" + req.Since.Format(time.RFC3339Nano)
		if kind == KindCancel {
			key = run
		}
		done := w.acted[key]
		if !done {
			w.acted[key] = true
		}
		w.mu.Unlock()
		if done || (kind != KindApproval && kind != KindCancel) {
			continue
		}
		go w.answer(ctx, run, kind, req)
	}
}

func (w *World) answer(ctx context.Context, run string, kind Kind, req Awaiting) {
	obj := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: run}}
	err := retry(ctx, func() error {
		if w.Checker.Terminated(run) {
			return nil
		}
		if kind == KindCancel {
			patch := fmt.Appendf(nil, `{"spec":{"stop":%q}}`, v1alpha1.StopCancel)
			return w.env.St.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
		}
		// Approvals are appended (an earlier one stays): read, add, update.
		cur := &v1alpha1.ResearchRun{}
		if err := w.env.St.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		// One already decided after the request answers it (an earlier try
		// of this update landed).
		if slices.ContainsFunc(cur.Spec.Approvals, func(a v1alpha1.Approval) bool {
			return a.ActionID == req.ActionID && a.Time != nil && !a.Time.Time.Before(req.Since.Truncate(time.Second))
		}) {
			return nil
		}
		cur.Spec.Approvals = append(cur.Spec.Approvals, v1alpha1.Approval{ActionID: req.ActionID, Decision: v1alpha1.DecisionApprove})
		return w.env.St.Client.Update(ctx, cur)
	})
	if err != nil && ctx.Err() == nil {
		w.env.logf("answering %s (%s, %s): %v", run, kind, req.ActionID, err)
	}
}

// Outcome is how a run ended: what the baseline compares.
type Outcome struct {
	Reason     v1alpha1.Reason     `json:"reason"`
	Settlement v1alpha1.Settlement `json:"settlement"`
	Attempts   int                 `json:"attempts"`
	// Ledger is each attempt's usage, as the run's status.ledger holds it.
	Ledger []LedgerEntry `json:"ledger"`
}

// LedgerEntry is one attempt's usage.
type LedgerEntry struct {
	Attempt       int32 `json:"attempt"`
	ModelRequests int64 `json:"modelRequests"`
	ToolCalls     int64 `json:"toolCalls"`
	Tokens        int64 `json:"tokens"`
}

func (o Outcome) String() string {
	parts := make([]string, 0, len(o.Ledger))
	for _, l := range o.Ledger {
		parts = append(parts, fmt.Sprintf("#%d %dmr/%dtc/%dtok", l.Attempt, l.ModelRequests, l.ToolCalls, l.Tokens))
	}
	return fmt.Sprintf("%s/%s attempts=%d ledger=[%s]", o.Reason, o.Settlement, o.Attempts, strings.Join(parts, " "))
}

// Equal compares two outcomes field by field.
func (o Outcome) Equal(b Outcome) bool {
	if o.Reason != b.Reason || o.Settlement != b.Settlement || o.Attempts != b.Attempts || len(o.Ledger) != len(b.Ledger) {
		return false
	}
	for i := range o.Ledger {
		if o.Ledger[i] != b.Ledger[i] {
			return false
		}
	}
	return true
}

// SameEndFewerCounts says whether o ended as b (reason, settlement, attempts)
// with a ledger no higher than b's in every count: counts were lost, none
// added (the gateway's documented loss on a kill).
func (o Outcome) SameEndFewerCounts(b Outcome) bool {
	if o.Reason != b.Reason || o.Settlement != b.Settlement || o.Attempts != b.Attempts || len(o.Ledger) != len(b.Ledger) {
		return false
	}
	for i := range o.Ledger {
		x, y := o.Ledger[i], b.Ledger[i]
		if x.Attempt != y.Attempt || x.ModelRequests > y.ModelRequests || x.ToolCalls > y.ToolCalls || x.Tokens > y.Tokens {
			return false
		}
	}
	return true
}
