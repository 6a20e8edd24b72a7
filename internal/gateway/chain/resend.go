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
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// pending is a failed output of a buffered interceptor, kept to be resent.
type pending struct {
	seq     uint64
	call    Call
	outcome Outcome
}

// queue is one buffered interceptor's resend buffer, oldest first.
type queue struct {
	mu    sync.Mutex
	limit int
	next  uint64
	items []pending
}

// resender resends the buffered outputs of a Chain's fail-open buffered
// interceptors. Its goroutine runs only while something waits to be resent.
type resender struct {
	c       *Chain
	ctx     context.Context
	cancel  context.CancelFunc
	sending sync.Mutex // one flush at a time (the loop, Close)

	mu      sync.Mutex
	running bool
	closed  bool
	wg      sync.WaitGroup
}

func newResender(c *Chain) *resender {
	ctx, cancel := context.WithCancel(context.Background())
	return &resender{c: c, ctx: logr.NewContext(ctx, c.opts.log), cancel: cancel}
}

// add keeps a copy of the failed output of l (the call without its token)
// and makes sure the resender runs.
func (r *resender) add(l *link, call *Call, out *Outcome) {
	p := pending{call: *call}
	p.call.Token = ""
	p.call.Arguments = cloneArgs(call.Arguments)
	p.call.Attributes = maps.Clone(call.Attributes)
	if out != nil {
		p.outcome = *out
	}

	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		l.m.dropped.Inc()
		r.c.opts.log.Error(nil, "Dropped the output of a buffered interceptor: the chain is closed",
			append(logKeys(call), "interceptor", l.spec.Name)...)
		return
	}

	q := l.box
	q.mu.Lock()
	q.next++
	p.seq = q.next
	q.items = append(q.items, p)
	dropped := len(q.items) > q.limit
	if dropped {
		q.items[0] = pending{}
		q.items = q.items[1:]
	}
	q.mu.Unlock()
	if dropped {
		l.m.dropped.Inc()
		r.c.opts.log.Error(nil, "Dropped the oldest buffered output of an interceptor: its resend buffer is full",
			"interceptor", l.spec.Name, "limit", q.limit)
	} else {
		l.m.buffered.Inc()
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running && !r.closed {
		r.running = true
		r.wg.Go(r.loop)
	}
}

// loop retries every interval until nothing is pending (or Close).
func (r *resender) loop() {
	t := time.NewTimer(r.c.opts.resendInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		r.flush(r.ctx)
		r.mu.Lock()
		if r.c.Pending() == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		t.Reset(r.c.opts.resendInterval)
	}
}

// flush resends each buffered interceptor's outputs, oldest first, stopping
// at its first failure.
func (r *resender) flush(ctx context.Context) {
	r.sending.Lock()
	defer r.sending.Unlock()
	for i := range r.c.links {
		l := &r.c.links[i]
		if !l.buffered {
			continue
		}
		for ctx.Err() == nil {
			l.box.mu.Lock()
			if len(l.box.items) == 0 {
				l.box.mu.Unlock()
				break
			}
			p := l.box.items[0]
			l.box.mu.Unlock()

			if err := r.try(ctx, l, p); err != nil {
				logr.FromContextOrDiscard(ctx).V(1).Info("Resend failed; retrying later",
					append(logKeys(&p.call), "interceptor", l.spec.Name, "error", err.Error())...)
				break
			}
			l.box.mu.Lock()
			if len(l.box.items) > 0 && l.box.items[0].seq == p.seq {
				l.box.items[0] = pending{}
				l.box.items = l.box.items[1:]
				l.m.buffered.Dec()
			} // else it was dropped meanwhile (buffer full), and counted then
			l.box.mu.Unlock()
			l.m.resends.Inc()
		}
	}
}

// try calls l's hook again with a copy of the pending call.
func (r *resender) try(ctx context.Context, l *link, p pending) (err error) {
	ctx, cancel := context.WithTimeout(ctx, r.c.opts.resendTimeout)
	defer cancel()
	defer func() {
		if _, ok := errors.AsType[*VetoError](err); ok {
			err = nil // a veto is an answer, not a failure to deliver
		}
	}()
	defer recoverHook(&err)
	call := p.call
	call.Arguments = cloneArgs(p.call.Arguments)
	call.Attributes = maps.Clone(p.call.Attributes)
	if l.spec.Phase == v1alpha1.InterceptorPre {
		return l.impl.Pre(ctx, &call)
	}
	out := p.outcome
	return l.impl.Post(ctx, &call, &out)
}

func (r *resender) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()

	// One last attempt, then count what is left as lost.
	r.flush(logr.NewContext(context.Background(), r.c.opts.log))
	for i := range r.c.links {
		l := &r.c.links[i]
		if !l.buffered {
			continue
		}
		l.box.mu.Lock()
		n := len(l.box.items)
		l.box.items = nil
		l.box.mu.Unlock()
		if n > 0 {
			l.m.dropped.Add(float64(n))
			l.m.buffered.Sub(float64(n))
			r.c.opts.log.Error(nil, "Dropped buffered outputs of an interceptor at close: they could not be resent",
				"interceptor", l.spec.Name, "count", n)
		}
	}
}

// Pending is how many outputs of buffered interceptors wait to be resent.
func (c *Chain) Pending() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.links {
		if q := c.links[i].box; q != nil {
			q.mu.Lock()
			n += len(q.items)
			q.mu.Unlock()
		}
	}
	return n
}

// Close stops the chain's resender after one last attempt to deliver what
// its buffered interceptors hold; what still fails is dropped and counted
// (agentrun_gateway_interceptor_dropped_total). Run keeps working after
// Close, but a buffered interceptor's failure is then dropped at once. A
// gateway closes a Chain when it replaces it (its policy's resolved chain
// changed) and at shutdown. Close is idempotent; a chain without buffered
// interceptors has nothing to close.
func (c *Chain) Close() {
	if c == nil || c.resend == nil {
		return
	}
	c.resend.close()
}

// cloneArgs copies arguments deeply (maps and slices of decoded JSON), so a
// kept copy does not change with the caller's map.
func cloneArgs(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneArgs(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	case map[string]string:
		return maps.Clone(t)
	case []string:
		return append([]string(nil), t...)
	}
	return v
}
