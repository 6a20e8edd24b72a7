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

package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// CallKind says whether a call is a model request or a tool call.
type CallKind string

const (
	// KindModel is a model (LLM) request.
	KindModel CallKind = "Model"
	// KindTool is a tool call.
	KindTool CallKind = "Tool"
)

// Call is one model request or tool call as interceptors and tools see it.
type Call struct {
	// Kind is Model or Tool.
	Kind CallKind
	// ID is unique within the attempt ("call-7", "model-3").
	ID string
	// Name is the tool's name, or the model's name for a model request.
	Name string
	// Args are the tool's arguments, decoded from their canonical JSON. A
	// redaction interceptor may rewrite them; the fingerprint is taken first.
	Args map[string]any
	// Effect and Risk come from the policy's tool catalogue (empty for model requests).
	Effect v1alpha1.Effect
	Risk   v1alpha1.Risk
	// Fingerprint is the canonical fingerprint of tool + arguments + context.
	Fingerprint string
	// IdempotencyKey is set for tools the catalogue declares idempotent; a
	// tool passes it to the system it changes so a replay has one effect.
	IdempotencyKey string
	// Attributes carry what interceptors establish for later ones (e.g. an
	// identity for rate limiting).
	Attributes map[string]string
}

// StringArg returns the string argument name, or "" when it is missing or
// not a string.
func (c *Call) StringArg(name string) string {
	s, _ := c.Args[name].(string)
	return s
}

func (c *Call) clone() Call {
	out := *c
	out.Args = maps.Clone(c.Args)
	out.Attributes = maps.Clone(c.Attributes)
	return out
}

// Outcome is the result of a dispatched call, as Around releases and Post
// hooks see it. A Post hook may rewrite Result (redaction).
type Outcome struct {
	Result string
	Err    error
}

// Interceptor implements one entry of the policy's chain, registered under
// the entry's name. Only the hook for the entry's phase is used, and it must
// be set: Pre for phase Pre, Around for Around, Post for Post. Hooks may be
// called concurrently and, for buffered interceptors, again later from the
// SDK's background goroutine with a copy of the call (resend).
type Interceptor struct {
	// Pre runs before the call. Returning Veto(reason) ends the call when the
	// entry has veto rights; any other error is a failure handled by the
	// entry's posture (onError).
	Pre func(ctx context.Context, call *Call) error
	// Around acquires something for the duration of the call (a rate-limit
	// token, a span) and returns its release, which the SDK calls on every
	// path (success, error, refusal by a later interceptor, panic). An error
	// is a failure handled by the entry's posture.
	Around func(ctx context.Context, call *Call) (release func(Outcome), err error)
	// Post runs after the call with its outcome. An error is a failure
	// handled by the entry's posture; with posture Deny the result is
	// withheld from the caller.
	Post func(ctx context.Context, call *Call, outcome *Outcome) error
}

func (ic Interceptor) has(phase v1alpha1.InterceptorPhase) bool {
	switch phase {
	case v1alpha1.InterceptorPre:
		return ic.Pre != nil
	case v1alpha1.InterceptorAround:
		return ic.Around != nil
	case v1alpha1.InterceptorPost:
		return ic.Post != nil
	}
	return false
}

// link is one entry of the resolved chain with its implementation.
type link struct {
	spec v1alpha1.ResolvedInterceptor
	impl Interceptor
}

// resolveChain pairs the resolved chain with the registered implementations,
// in exactly the chain's order. It fails closed on any entry without an
// implementation for its phase.
func resolveChain(policy string, chain []v1alpha1.ResolvedInterceptor,
	registered map[string]Interceptor) ([]link, error) {
	links := make([]link, 0, len(chain))
	var errs []error
	for _, e := range chain {
		impl, ok := registered[e.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("interceptor %q (%s, phase %s, onError %s) is in RuntimePolicy %q's "+
				"resolved chain but not registered with this agent",
				e.Name, e.Class, e.Phase, e.OnError, policy))
		case !impl.has(e.Phase):
			errs = append(errs, fmt.Errorf("interceptor %q is registered without a %s hook, "+
				"which its phase in RuntimePolicy %q's resolved chain needs",
				e.Name, e.Phase, policy))
		default:
			links = append(links, link{spec: e, impl: impl})
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w; refusing to start (fail closed): %w", ErrUnregisteredInterceptor, errors.Join(errs...))
	}
	return links, nil
}

// pending is a failed output of a buffered interceptor, kept for resending.
type pending struct {
	id      uint64
	link    link
	call    Call
	outcome Outcome
}

// outbox holds the failed outputs of buffered interceptors, bounded per
// interceptor; they are resent on later flush ticks and at Close.
type outbox struct {
	// sending serialises resends (the write loop and Close), so one output
	// is not resent twice at once.
	sending sync.Mutex
	mu      sync.Mutex
	limit   int
	next    uint64
	order   []string
	items   map[string][]pending
}

func (o *outbox) add(p pending) (dropped bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.items == nil {
		o.items = map[string][]pending{}
	}
	name := p.link.spec.Name
	o.next++
	p.id = o.next
	if _, ok := o.items[name]; !ok {
		o.order = append(o.order, name)
	}
	q := append(o.items[name], p)
	if len(q) > o.limit {
		q, dropped = q[len(q)-o.limit:], true
	}
	o.items[name] = q
	return dropped
}

func (o *outbox) remove(name string, id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.items[name] = slices.DeleteFunc(o.items[name], func(p pending) bool { return p.id == id })
}

func (o *outbox) len(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items[name])
}

func (o *outbox) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, q := range o.items {
		n += len(q)
	}
	return n
}

// Buffered returns how many failed outputs of interceptor name wait to be resent.
func (a *Agent) Buffered(name string) int { return a.outbox.len(name) }

// intercept runs call through the resolved chain, in the chain's order:
// Pre and Around entries before do, Around releases after it (on every
// path), then Post entries. It returns the (possibly rewritten) result.
func (a *Agent) intercept(ctx context.Context, call *Call,
	do func(context.Context) (string, error)) (result string, err error) {
	var releases []func(Outcome)
	outcome := Outcome{Err: errors.New("the call did not complete")}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		for _, rel := range slices.Backward(releases) {
			a.safeRelease(rel, outcome)
		}
	}
	// Around interceptors release on every path, panics included.
	defer release()

	for _, l := range a.chain {
		switch l.spec.Phase {
		case v1alpha1.InterceptorPre:
			herr := a.invoke(ctx, l, func() error { return l.impl.Pre(ctx, call) })
			if herr == nil {
				continue
			}
			if veto, ok := errors.AsType[*VetoError](herr); ok {
				if l.spec.Veto {
					return "", a.refuse(ErrVetoed, call, l.spec.Name,
						fmt.Sprintf("interceptor %q vetoed: %s", l.spec.Name, veto.Reason))
				}
				continue // no veto rights: logged and counted by invoke
			}
			if err := a.interceptorFailed(l, call, nil, herr); err != nil {
				return "", err
			}
		case v1alpha1.InterceptorAround:
			var rel func(Outcome)
			herr := a.invoke(ctx, l, func() error {
				var e error
				rel, e = l.impl.Around(ctx, call)
				return e
			})
			if herr != nil {
				if err := a.interceptorFailed(l, call, nil, herr); err != nil {
					return "", err
				}
				continue
			}
			if rel != nil {
				releases = append(releases, rel)
			}
		}
	}

	res, derr := do(ctx)
	outcome = Outcome{Result: res, Err: derr}
	release()

	for _, l := range a.chain {
		if l.spec.Phase != v1alpha1.InterceptorPost {
			continue
		}
		herr := a.invoke(ctx, l, func() error { return l.impl.Post(ctx, call, &outcome) })
		if herr == nil {
			continue
		}
		if err := a.interceptorFailed(l, call, &outcome, herr); err != nil {
			return "", err
		}
	}
	return outcome.Result, outcome.Err
}

// invoke calls one hook, timing it and turning a panic into an error.
func (a *Agent) invoke(_ context.Context, l link, hook func() error) (err error) {
	start := a.clock.Now()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("interceptor %q panicked: %v", l.spec.Name, r)
		}
		outcome := OutcomeOK
		var veto *VetoError
		switch {
		case errors.As(err, &veto) && l.spec.Veto && l.spec.Phase == v1alpha1.InterceptorPre:
			outcome = OutcomeVeto
		case errors.As(err, &veto):
			outcome = OutcomeVetoIgnored
			a.log.Info("Ignored a veto from an interceptor without veto rights",
				"interceptor", l.spec.Name, "reason", veto.Reason)
		case err != nil:
			outcome = OutcomeError
		}
		a.metrics.interceptorSeconds.WithLabelValues(l.spec.Name, outcome).Observe(a.clock.Since(start).Seconds())
	}()
	return hook()
}

// interceptorFailed applies the failed interceptor's posture: Deny refuses
// the call naming the interceptor (the returned error); Allow logs, counts
// (a Hook fault) and continues, keeping the failed output for resending
// when the interceptor is buffered.
func (a *Agent) interceptorFailed(l link, call *Call, outcome *Outcome, herr error) error {
	a.metrics.interceptorErrors.WithLabelValues(l.spec.Name, string(l.spec.OnError)).Inc()
	if l.spec.OnError != v1alpha1.PostureAllow {
		// Deny, and anything unknown: fail closed.
		return a.refuse(ErrInterceptorDenied, call, l.spec.Name,
			fmt.Sprintf("interceptor %q (onError %s) failed: %v", l.spec.Name, l.spec.OnError, herr))
	}
	a.log.Error(herr, "Interceptor failed; continuing (onError Allow)", "interceptor", l.spec.Name, "call", call.Name)
	a.recordFault(v1alpha1.FaultScopeHook, "InterceptorError", true,
		fmt.Sprintf("interceptor %q failed on %s: %v", l.spec.Name, call.Name, herr))
	if l.spec.Buffered && l.spec.Phase != v1alpha1.InterceptorAround {
		p := pending{link: l, call: call.clone()}
		if outcome != nil {
			p.outcome = *outcome
		}
		if a.outbox.add(p) {
			a.recordFault(v1alpha1.FaultScopeHook, "BufferOverflow", false,
				fmt.Sprintf("interceptor %q's resend buffer is full (%d); its oldest output was dropped",
					l.spec.Name, a.outbox.limit))
		}
		a.metrics.buffered.WithLabelValues(l.spec.Name).Set(float64(a.outbox.len(l.spec.Name)))
	}
	return nil
}

func (a *Agent) safeRelease(rel func(Outcome), o Outcome) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error(fmt.Errorf("%v", r), "Interceptor release panicked")
		}
	}()
	rel(o)
}

// resend retries the buffered outputs, oldest first per interceptor; it
// stops at an interceptor's first failure, keeping order.
func (a *Agent) resend(ctx context.Context) {
	a.outbox.sending.Lock()
	defer a.outbox.sending.Unlock()
	a.outbox.mu.Lock()
	names := append([]string(nil), a.outbox.order...)
	a.outbox.mu.Unlock()
	for _, name := range names {
		for {
			a.outbox.mu.Lock()
			q := a.outbox.items[name]
			if len(q) == 0 {
				a.outbox.mu.Unlock()
				break
			}
			p := q[0]
			a.outbox.mu.Unlock()

			call, outcome := p.call.clone(), p.outcome
			start := a.clock.Now()
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("interceptor %q panicked: %v", name, r)
					}
				}()
				if p.link.spec.Phase == v1alpha1.InterceptorPre {
					return p.link.impl.Pre(ctx, &call)
				}
				return p.link.impl.Post(ctx, &call, &outcome)
			}()
			var veto *VetoError
			if err != nil && !errors.As(err, &veto) {
				a.metrics.interceptorSeconds.WithLabelValues(name, OutcomeError).Observe(a.clock.Since(start).Seconds())
				break
			}
			a.metrics.interceptorSeconds.WithLabelValues(name, OutcomeResent).Observe(a.clock.Since(start).Seconds())
			a.outbox.remove(name, p.id)
			a.metrics.buffered.WithLabelValues(name).Set(float64(a.outbox.len(name)))
		}
	}
}
