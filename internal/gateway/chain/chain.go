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

package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Kind says whether a call is a tool call or a model request.
type Kind string

const (
	// KindTool is a tool call (MCP tools/call).
	KindTool Kind = "Tool"
	// KindModel is a model request (chat completion).
	KindModel Kind = "Model"
)

// Call is one tool call or model request as the interceptors see it. The
// chain's hooks may change it (auth sets Identity, redact rewrites
// Arguments); what the gateway dispatches and audits is what the chain left.
type Call struct {
	// Kind is Tool or Model.
	Kind Kind
	// Namespace, Run and Attempt name the RunAttempt the call belongs to;
	// Policy is its RuntimePolicy.
	Namespace, Run, Attempt, Policy string
	// Token is the caller's bearer token, for auth to re-check. It is never
	// logged, audited or kept in a resend buffer.
	Token string
	// Identity is who the call comes from, set by auth (e.g.
	// "system:serviceaccount:team:agentrun-runner/pod-name"); rate_limit
	// keys its buckets on it.
	Identity string
	// Tool is the tool's name, or the model's name for a model request.
	Tool string
	// Effect and Risk come from the policy's tool catalogue (empty for
	// model requests).
	Effect v1alpha1.Effect
	Risk   v1alpha1.Risk
	// Arguments are the tool's arguments (or the request's parameters).
	// redact may replace them; hooks replace the map rather than write into
	// it, so the caller's map is never changed behind its back.
	Arguments map[string]any
	// Attributes carry what interceptors establish for later ones.
	Attributes map[string]string
	// Time is when the gateway received the call; Run sets it when zero.
	// A resent audit line carries this time, not the time of the resend.
	Time time.Time
}

// Outcome is what the dispatched call produced. Post hooks may rewrite
// Result (redaction).
type Outcome struct {
	// Result is the tool's result text or the model's answer.
	Result string
	// IsError says the tool reported an error in its result (MCP isError).
	IsError bool
	// Err is a failure to get a result at all (transport, timeout, upstream).
	Err error
}

// Failed reports whether the call did not succeed (IsError or Err).
func (o Outcome) Failed() bool { return o.IsError || o.Err != nil }

// Impl implements one interceptor. Only the hook for the phase its entry in
// the resolved chain names is used, and it must be set. Hooks are called
// concurrently, and for buffered interceptors again later from the chain's
// resender with a copy of the call and outcome.
type Impl struct {
	// Pre runs before dispatch. Veto(reason) refuses the call when the entry
	// has veto rights; any other error is handled by the entry's posture.
	Pre func(ctx context.Context, call *Call) error
	// Around acquires something for the duration of the dispatch and returns
	// its release (may be nil), which the chain calls exactly once on every
	// path: after dispatch, on a refusal by a later interceptor, and when
	// dispatch panics. An error is handled by the entry's posture.
	Around func(ctx context.Context, call *Call) (release func(Outcome), err error)
	// Post runs after dispatch with its outcome. An error is handled by the
	// entry's posture; with Deny the result is withheld from the caller.
	Post func(ctx context.Context, call *Call, outcome *Outcome) error
	// Drain, if set, stops the interceptor's own writers (a queue it hands
	// its output to) and waits until what it queued is written, or ctx ends
	// (Registry.Drain).
	Drain func(ctx context.Context) error
}

func (i Impl) has(phase v1alpha1.InterceptorPhase) bool {
	switch phase {
	case v1alpha1.InterceptorPre:
		return i.Pre != nil
	case v1alpha1.InterceptorAround:
		return i.Around != nil
	case v1alpha1.InterceptorPost:
		return i.Post != nil
	}
	return false
}

// Registry holds the interceptor implementations a gateway has, by the name
// a RuntimePolicy's interceptor entry uses.
type Registry map[string]Impl

// VetoError is an interceptor's deliberate "no" (see Veto).
type VetoError struct {
	Reason string
}

func (e *VetoError) Error() string { return "vetoed: " + e.Reason }

// Veto returns the error a Pre hook returns to refuse a call. It refuses the
// call only when the interceptor's entry has veto rights; from any other
// entry (or phase) it is logged and counted (outcome veto_ignored) and the
// chain continues.
func Veto(reason string) error { return &VetoError{Reason: reason} }

// ErrNotImplemented is wrapped by New's error when the resolved chain names
// an interceptor the Registry does not implement.
var ErrNotImplemented = errors.New("interceptor not implemented by this gateway")

// ErrSecurityFailsOpen is wrapped by New's error when the resolved chain
// has a Security-class entry whose onError is not Deny. The RuntimePolicy
// webhook and the operator refuse such a policy; a snapshot that says so
// anyway (a tampered status, an old object) is refused here too.
var ErrSecurityFailsOpen = errors.New("a Security-class interceptor does not fail closed")

// Refusal is the chain's answer when it will not give the caller a result.
type Refusal struct {
	// Interceptor is the name of the interceptor that refused.
	Interceptor string
	// Class and Phase are the interceptor's, as the resolved chain says.
	Class v1alpha1.InterceptorClass
	Phase v1alpha1.InterceptorPhase
	// Veto is true for a deliberate refusal (Err is a *VetoError); false for
	// a fail-closed interceptor that errored or panicked.
	Veto bool
	// Dispatched is true when the call ran before the refusal (a Post
	// interceptor failed): its effect may have happened, only its result is
	// withheld.
	Dispatched bool
	// Err is the interceptor's error (or veto).
	Err error
}

func (r *Refusal) Error() string {
	if r.Veto {
		reason := r.Err.Error()
		if v, ok := errors.AsType[*VetoError](r.Err); ok {
			reason = v.Reason
		}
		return fmt.Sprintf("vetoed by %s: %s", r.Interceptor, reason)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "interceptor %s (%s, fail closed) failed: ", r.Interceptor, r.Class)
	if r.Dispatched {
		b.WriteString("the call ran but its result is withheld: ")
	}
	b.WriteString(r.Err.Error())
	return b.String()
}

// Unwrap returns the interceptor's error.
func (r *Refusal) Unwrap() error { return r.Err }

// link is one resolved entry with its implementation and its metrics.
type link struct {
	spec     v1alpha1.ResolvedInterceptor
	impl     Impl
	failOpen bool // onError Allow; anything else fails closed
	buffered bool // failOpen, Buffered, and not Around
	canVeto  bool // Pre with veto rights
	timeout  time.Duration
	m        linkMetrics
	box      *queue // resend buffer (buffered links only)
	obs      func(Observation)
}

// Chain runs calls through one resolved interceptor chain. It is immutable
// after New and safe for concurrent use.
type Chain struct {
	links  []link
	pre    int // links[:pre] are Pre and Around (in chain order), the rest Post
	m      *Metrics
	added  [2]observer // chain added latency for KindTool, KindModel
	opts   options
	resend *resender // nil when no link is buffered
}

// Option configures a Chain.
type Option func(*options)

type options struct {
	bufferLimit    int
	resendInterval time.Duration
	resendTimeout  time.Duration
	log            logr.Logger
	observer       func(Observation)
}

// Observation is the outcome of one hook call, as an observer
// (WithObserver) sees it.
type Observation struct {
	// Kind is the call's: Tool or Model.
	Kind Kind
	// Interceptor, Class and Phase are the entry's.
	Interceptor string
	Class       v1alpha1.InterceptorClass
	Phase       v1alpha1.InterceptorPhase
	// Outcome is OutcomeOK, OutcomeError (the hook failed: not a veto),
	// OutcomePanic, OutcomeVeto or OutcomeVetoIgnored.
	Outcome string
}

// Failed reports whether the hook failed (an error or a panic): a veto is
// an answer, not a failure.
func (o Observation) Failed() bool { return o.Outcome == OutcomeError || o.Outcome == OutcomePanic }

// WithBufferLimit bounds each buffered interceptor's resend buffer (default
// 1000 entries); beyond it the oldest entry is dropped and counted.
func WithBufferLimit(n int) Option { return func(o *options) { o.bufferLimit = n } }

// WithResendInterval sets how often the resender retries (default 1s).
func WithResendInterval(d time.Duration) Option { return func(o *options) { o.resendInterval = d } }

// WithResendTimeout bounds one resend attempt of one entry (default 5s).
func WithResendTimeout(d time.Duration) Option { return func(o *options) { o.resendTimeout = d } }

// WithLogger sets the logger of the resender and of calls whose context
// carries no logger (default: discard).
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithObserver has fn told the outcome of every hook call of the chain's
// calls (not of resends), synchronously, after the hook returns: it must
// not block.
func WithObserver(fn func(Observation)) Option { return func(o *options) { o.observer = fn } }

// New pairs the resolved chain (in the order given: it is never sorted
// again) with the registry's implementations, leaving out the entries
// enforced by the agent (enforcement Agent). It fails naming every other
// entry the registry does not implement for its phase; the gateway refuses
// the calls of such a policy with that error. It fails too, before anything
// else, naming every Security-class entry that would not hold the call when
// it fails — onError not Deny, or left to the agent (ErrSecurityFailsOpen) —
// whatever the snapshot says. m may be nil (metrics are then
// kept but not exported).
func New(resolved []v1alpha1.ResolvedInterceptor, reg Registry, m *Metrics, opts ...Option) (*Chain, error) {
	o := options{bufferLimit: 1000, resendInterval: time.Second, resendTimeout: 5 * time.Second, log: logr.Discard()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.bufferLimit <= 0 {
		o.bufferLimit = 1
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	c := &Chain{m: m, opts: o}
	c.added[0] = m.added.WithLabelValues(string(KindTool))
	c.added[1] = m.added.WithLabelValues(string(KindModel))

	var missing, open []string
	var pre, post []link
	for _, e := range resolved {
		impl, ok := reg[e.Name]
		switch {
		case e.Class == v1alpha1.ClassSecurity && (e.OnError != v1alpha1.PostureDeny || e.Enforcement == v1alpha1.EnforcementAgent):
			if e.Enforcement == v1alpha1.EnforcementAgent {
				open = append(open, fmt.Sprintf("%s (%s, enforcement: %s)", e.Name, e.Phase, e.Enforcement))
			} else {
				open = append(open, fmt.Sprintf("%s (%s, onError: %q)", e.Name, e.Phase, e.OnError))
			}
			continue
		case e.Enforcement == v1alpha1.EnforcementAgent:
			continue // binds only agents that run it themselves
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%s, %s)", e.Name, e.Phase, e.Class))
			continue
		case !impl.has(e.Phase):
			missing = append(missing, fmt.Sprintf("%s (%s, %s: implemented without a %s hook)",
				e.Name, e.Phase, e.Class, e.Phase))
			continue
		}
		l := link{spec: e, impl: impl, failOpen: e.OnError == v1alpha1.PostureAllow,
			canVeto: e.Veto && e.Phase == v1alpha1.InterceptorPre, timeout: hookTimeout(e),
			m: m.forLink(e.Name, e.Phase), obs: o.observer}
		l.buffered = l.failOpen && e.Buffered && e.Phase != v1alpha1.InterceptorAround
		if l.buffered {
			l.box = &queue{limit: o.bufferLimit}
		}
		if e.Phase == v1alpha1.InterceptorPost {
			post = append(post, l)
		} else {
			pre = append(pre, l)
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("%w: %s (a Security-class interceptor must have onError: Deny and be enforced by the gateway; "+
			"this gateway never runs one that fails open, so calls are refused, fail closed)",
			ErrSecurityFailsOpen, strings.Join(open, ", "))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s (the resolved chain runs only when every entry is implemented; "+
			"calls are refused, fail closed)", ErrNotImplemented, strings.Join(missing, ", "))
	}
	c.links = append(pre, post...)
	c.pre = len(pre)
	for i := range c.links {
		if c.links[i].buffered {
			c.resend = newResender(c)
			break
		}
	}
	return c, nil
}

// Len is the number of interceptors in the chain.
func (c *Chain) Len() int {
	if c == nil {
		return 0
	}
	return len(c.links)
}

// Run runs call through the chain: Pre and Around entries in chain order,
// then dispatch, then the Around releases in reverse order (on every path,
// a panicking dispatch included), then Post entries in chain order. It
// returns the outcome as the Post entries left it, or a Refusal (and no
// outcome) when an entry refused: before dispatch (a veto, or a fail-closed
// entry that errored: dispatch is not called) or after it (a fail-closed
// Post entry errored: the result is withheld, and the remaining Post
// entries do not run, since they depend on its output). A nil or empty
// Chain dispatches directly.
func (c *Chain) Run(ctx context.Context, call *Call,
	dispatch func(ctx context.Context, call *Call) Outcome) (Outcome, *Refusal) {
	if c == nil || len(c.links) == 0 {
		return dispatch(ctx, call), nil
	}
	start := time.Now()
	if call.Time.IsZero() {
		call.Time = start
	}
	var spent time.Duration // in dispatch
	defer func() { c.addedObserver(call.Kind).Observe((time.Since(start) - spent).Seconds()) }()

	// Around releases, in acquisition order; released in reverse on every
	// path. (No slice is allocated for a chain without Around entries.)
	r := releases{c: c, ctx: ctx, call: call, outcome: Outcome{Err: errNotCompleted}}
	defer r.release()

	for i := range c.links[:c.pre] {
		l := &c.links[i]
		var err error
		if l.spec.Phase == v1alpha1.InterceptorAround {
			var rel func(Outcome)
			rel, err = c.around(ctx, l, call)
			if err == nil && rel != nil {
				r.fns = append(r.fns, rel)
			}
		} else {
			err = c.pre1(ctx, l, call)
		}
		if err != nil {
			if ref := c.failed(ctx, l, call, nil, err, false); ref != nil {
				return Outcome{}, ref
			}
		}
	}

	d := time.Now()
	out := dispatch(ctx, call)
	spent = time.Since(d)
	r.outcome = out
	r.release()

	for i := range c.links[c.pre:] {
		l := &c.links[c.pre+i]
		if err := c.post1(ctx, l, call, &out); err != nil {
			if ref := c.failed(ctx, l, call, &out, err, true); ref != nil {
				return Outcome{}, ref
			}
		}
	}
	return out, nil
}

func (c *Chain) addedObserver(k Kind) observer {
	switch k {
	case KindTool:
		return c.added[0]
	case KindModel:
		return c.added[1]
	}
	return c.m.added.WithLabelValues(string(k))
}

// errNotCompleted is the outcome Around releases see when the call did not
// complete (refused by a later interceptor, or dispatch panicked).
var errNotCompleted = errors.New("the call did not complete")

// releases calls the Around releases once, in reverse order.
type releases struct {
	c       *Chain
	ctx     context.Context
	call    *Call
	fns     []func(Outcome)
	outcome Outcome
	done    bool
}

func (r *releases) release() {
	if r.done {
		return
	}
	r.done = true
	for _, fn := range slices.Backward(r.fns) {
		r.c.release1(r.ctx, r.call, fn, r.outcome)
	}
}

// hookTimeout is the entry's timeout, or v1alpha1.DefaultInterceptorTimeout.
func hookTimeout(e v1alpha1.ResolvedInterceptor) time.Duration {
	if e.Timeout != nil && e.Timeout.Duration > 0 {
		return e.Timeout.Duration
	}
	return v1alpha1.DefaultInterceptorTimeout
}

// pre1, around and post1 call one hook under the entry's timeout, timing
// and counting it; a panic is returned as an error (errPanic), and an error
// once the timeout passed says so.
func (c *Chain) pre1(ctx context.Context, l *link, call *Call) (err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	defer l.observe(time.Now(), call.Kind, &err)
	defer l.timedOut(ctx, &err)
	defer recoverHook(&err)
	return l.impl.Pre(ctx, call)
}

func (c *Chain) around(ctx context.Context, l *link, call *Call) (rel func(Outcome), err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	defer l.observe(time.Now(), call.Kind, &err)
	defer l.timedOut(ctx, &err)
	defer recoverHook(&err)
	return l.impl.Around(ctx, call)
}

func (c *Chain) post1(ctx context.Context, l *link, call *Call, out *Outcome) (err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	defer l.observe(time.Now(), call.Kind, &err)
	defer l.timedOut(ctx, &err)
	defer recoverHook(&err)
	return l.impl.Post(ctx, call, out)
}

// timedOut names the entry's timeout in an error its hook returned once
// the hook's context had passed it (a veto stays a veto).
func (l *link) timedOut(ctx context.Context, err *error) {
	if *err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return
	}
	if _, ok := errors.AsType[*VetoError](*err); ok {
		return
	}
	*err = &TimeoutError{Timeout: l.timeout, Err: *err}
}

// TimeoutError is the error of a hook that failed once its entry's timeout
// (spec.interceptors[].timeout) had passed.
type TimeoutError struct {
	Timeout time.Duration
	Err     error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("exceeded its timeout of %s: %v", e.Timeout, e.Err)
}

// Unwrap returns the hook's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// release1 calls one Around release; a panic there is logged and counted
// (the call has already been decided).
func (c *Chain) release1(ctx context.Context, call *Call, rel func(Outcome), o Outcome) {
	var err error
	defer func() {
		if err != nil {
			c.logger(ctx).Error(err, "Interceptor release panicked", logKeys(call)...)
		}
	}()
	defer recoverHook(&err)
	rel(o)
}

// errPanic marks a hook's panic turned into an error.
type errPanic struct{ v any }

func (e errPanic) Error() string { return fmt.Sprintf("panicked: %v", e.v) }

func recoverHook(err *error) {
	if v := recover(); v != nil {
		*err = errPanic{v: v}
	}
}

// failed applies the posture of the entry whose hook returned err. It
// returns the Refusal to answer with, or nil to continue.
func (c *Chain) failed(ctx context.Context, l *link, call *Call, out *Outcome, err error, dispatched bool) *Refusal {
	if _, ok := errors.AsType[*VetoError](err); ok {
		if l.canVeto {
			l.m.denials.Inc()
			return &Refusal{Interceptor: l.spec.Name, Class: l.spec.Class, Phase: l.spec.Phase, Veto: true, Err: err}
		}
		c.logger(ctx).Info("Ignored a veto from an interceptor without veto rights",
			append(logKeys(call), "interceptor", l.spec.Name, "phase", l.spec.Phase, "reason", err.Error())...)
		return nil
	}
	if errors.Is(err, ErrQueueFull) {
		l.m.queueFull.Inc()
	}
	if !l.failOpen {
		l.m.denials.Inc()
		return &Refusal{Interceptor: l.spec.Name, Class: l.spec.Class, Phase: l.spec.Phase,
			Dispatched: dispatched, Err: err}
	}
	kv := append(logKeys(call), "interceptor", l.spec.Name, "phase", l.spec.Phase, "buffered", l.buffered)
	c.logger(ctx).Error(err, "Interceptor failed; continuing (onError Allow)", kv...)
	if l.buffered {
		c.resend.add(l, call, out)
	}
	return nil
}

func (c *Chain) logger(ctx context.Context) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	return c.opts.log
}

// logKeys are the call's log keys: never the token or the arguments.
func logKeys(call *Call) []any {
	return []any{"kind", call.Kind, "tool", call.Tool, "namespace", call.Namespace,
		"run", call.Run, "attempt", call.Attempt}
}
