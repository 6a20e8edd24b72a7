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
	"context"
	"errors"
	"maps"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// A transient authority outage is the gateway's to absorb, not the client's
// (issue 30, item 6): while a fail-closed interceptor reports that what it
// checks with is unreachable for now (chain.ErrUnavailable: a TokenReview,
// a quota service), the door holds the call and checks again with backoff,
// for the policy's authorityWait and never past the run's deadline, and
// answers 503 interceptor_unavailable only then. Any client — the Python
// SDK, @openai/agents, curl — gets what only the Go SDK's own loop gave
// before. A veto, a plain error or a panic is not held: it would fail the
// same way again.
//
// A call with a side effect (a Write or External tool) is not held: it is
// answered at once, as before, and its client asks again. A held call
// outlives a client that gives up only as long as its request does, but an
// MCP session's call may not end with its HTTP request, and an agent that
// moved on (or an attempt that died and was replaced) must never have a
// stray effect land behind it: the chaos suite's API-server restart showed
// a held ticket filed twice. A stray read or model request costs only its
// count.

// DefaultAuthorityWait is the hold when the policy sets no authorityWait.
const DefaultAuthorityWait = 30 * time.Second

// authorityWait is how long a call may be held from now: the policy's
// wait (default DefaultAuthorityWait), never past the run's deadline (in
// Finalizing its hard deadline) less minCall, the time the call itself
// needs.
func authorityWait(spec v1alpha1.RunAttemptSpec, now time.Time, minCall time.Duration) time.Duration {
	wait := DefaultAuthorityWait
	if spec.Policy.AuthorityWait != nil {
		wait = spec.Policy.AuthorityWait.Duration
	}
	switch until, e := callWindow(spec, now, minCall); {
	case e != nil:
		return 0 // too late for the call itself: nothing to wait for
	case !until.IsZero():
		wait = min(wait, until.Sub(now)-minCall)
	}
	return max(wait, 0)
}

// holdBackoff is the pause before the n-th check again (n from 0): 250ms,
// doubling, at most 2s.
func holdBackoff(n int) time.Duration {
	d := 250 * time.Millisecond
	for range min(n, 3) {
		d *= 2
	}
	return d
}

// holdsFor says whether a call may be held at all: a model request or a
// tool call without side effects.
func holdsFor(cc *chain.Call) bool {
	return cc.Kind != chain.KindTool || cc.Effect == "" || cc.Effect == v1alpha1.EffectNone
}

// holdable says whether a refusal is one to hold the call on: a fail-closed
// interceptor's authority unreachable, before anything was dispatched.
func holdable(ref *chain.Refusal) bool {
	return ref != nil && !ref.Veto && !ref.Dispatched && errors.Is(ref.Err, chain.ErrUnavailable)
}

// runChain runs ch around dispatch, holding the call while its refusal is
// holdable and the wait allows (each try on a copy of the call as it came:
// an interceptor's rewrite of the arguments is not applied twice).
func (k *keeper) runChain(ctx context.Context, ch *chain.Chain, cc *chain.Call,
	dispatch func(context.Context, *chain.Call) chain.Outcome) (chain.Outcome, *chain.Refusal) {
	k.mu.Lock()
	end := k.g.clock.Now()
	if holdsFor(cc) {
		end = end.Add(authorityWait(k.obj.Spec, k.g.clock.Now(), k.g.opts.MinCallTime))
	}
	k.mu.Unlock()
	held := false
	for n := 0; ; n++ {
		try := *cc
		try.Arguments = maps.Clone(cc.Arguments)
		out, ref := ch.Run(ctx, &try, dispatch)
		if !holdable(ref) {
			if held {
				k.g.metrics.authorityHolds.WithLabelValues("recovered").Inc()
			}
			*cc = try
			return out, ref
		}
		pause := holdBackoff(n)
		if k.g.clock.Now().Add(pause).After(end) {
			if held {
				k.g.metrics.authorityHolds.WithLabelValues("expired").Inc()
			}
			return out, ref
		}
		if !held {
			held = true
			k.log.Info("Holding a call: an interceptor's authority is unreachable", "interceptor", ref.Interceptor,
				"error", ref.Err.Error(), "until", end)
		}
		select {
		case <-ctx.Done():
			k.g.metrics.authorityHolds.WithLabelValues("expired").Inc()
			return out, ref
		case <-k.g.clock.After(pause):
		}
	}
}
