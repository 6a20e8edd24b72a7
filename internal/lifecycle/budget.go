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
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Defaults used when a spec field is unset. They are the API's
// +kubebuilder:default values, or (deadline, maxAttempts, maxSteps) the
// built-in defaults the admission webhook writes into a run whose tier sets
// none, so a run the API server defaulted and a run built in a test decide
// alike.
const (
	DefaultDeadline          = v1alpha1.DefaultRunDeadline
	DefaultFinalizationGrace = 2 * time.Minute
	DefaultBackoff           = 5 * time.Second
	DefaultHeartbeatTimeout  = 60 * time.Second
	DefaultStartTimeout      = 5 * time.Minute
	DefaultMaxAttempts       = v1alpha1.DefaultRunMaxAttempts
	DefaultMaxSteps          = v1alpha1.DefaultRunMaxSteps
	DefaultSameCallLimit     = int32(3)
	DefaultNoProgressLimit   = int32(5)
	DefaultDegradeAtPercent  = int32(75)
	DefaultCompressAtPercent = int32(90)
)

// StopPollInterval is how soon to look again while waiting for a pod to stop.
// The pod's deletion also triggers a pass; this is the safety net.
const StopPollInterval = time.Second

// limits is the run's spec with defaults applied.
type limits struct {
	budget   v1alpha1.Usage // total budget, reserve included
	tokens   bool           // tokens are budgeted
	cost     bool           // cost is budgeted
	reserve  v1alpha1.Usage // output reserve
	deadline time.Duration
	grace    time.Duration

	backoff          time.Duration
	heartbeatTimeout time.Duration // 0: heartbeats are not checked
	startTimeout     time.Duration // 0: pod start is not timed
	maxAttempts      int32

	maxSteps    int32
	sameCall    int32
	noProgress  int32
	degradePct  int32
	compressPct int32
}

// limitsFor applies the defaults to spec.
func limitsFor(spec v1alpha1.ResearchRunSpec) limits {
	b := spec.Budget
	l := limits{
		budget: v1alpha1.Usage{ModelRequests: b.ModelRequests, ToolCalls: b.ToolCalls},
		tokens: b.Tokens != nil,
		reserve: v1alpha1.Usage{
			ModelRequests: b.OutputReserve.ModelRequests,
			ToolCalls:     b.OutputReserve.ToolCalls,
			Tokens:        b.OutputReserve.Tokens,
			Cost:          b.OutputReserve.Cost,
		},
		cost: b.Cost != nil,
	}
	if l.tokens {
		l.budget.Tokens = *b.Tokens
	}
	if l.cost {
		l.budget.Cost = *b.Cost
	}
	l.reserve = l.shown(l.reserve)
	l.deadline = durationOr(b.Deadline, DefaultDeadline)
	l.grace = durationOr(b.FinalizationGrace, DefaultFinalizationGrace)
	r := spec.Recovery
	l.backoff = durationOr(r.Backoff, DefaultBackoff)
	l.heartbeatTimeout = durationOr(r.HeartbeatTimeout, DefaultHeartbeatTimeout)
	l.startTimeout = durationOr(r.StartTimeout, DefaultStartTimeout)
	l.maxAttempts = int32Or(r.MaxAttempts, DefaultMaxAttempts)
	g := spec.Gates
	l.maxSteps = int32Or(g.MaxSteps, DefaultMaxSteps)
	l.sameCall = int32Or(g.SameCallLimit, DefaultSameCallLimit)
	l.noProgress = int32Or(g.NoProgressLimit, DefaultNoProgressLimit)
	l.degradePct = int32Or(g.DegradeAtPercent, DefaultDegradeAtPercent)
	l.compressPct = int32Or(g.CompressAtPercent, DefaultCompressAtPercent)
	return l
}

// shown is u with the units the run does not budget (tokens, cost) zeroed.
func (l limits) shown(u v1alpha1.Usage) v1alpha1.Usage {
	if !l.tokens {
		u.Tokens = 0
	}
	if !l.cost {
		u.Cost = 0
	}
	return u
}

// working is the working budget: budget minus reserve, per unit (may be ≤ 0).
func (l limits) working() v1alpha1.Usage { return sub(l.budget, l.reserve) }

// durationOr is *d, or def when d is unset; a negative duration counts as 0.
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return max(d.Duration, 0)
}

// int32Or is v, or def when v is unset (or not positive).
func int32Or(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// Usage arithmetic, per unit.

func add(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: a.ModelRequests + b.ModelRequests, ToolCalls: a.ToolCalls + b.ToolCalls,
		Tokens: a.Tokens + b.Tokens, Cost: a.Cost + b.Cost}
}

func sub(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: a.ModelRequests - b.ModelRequests, ToolCalls: a.ToolCalls - b.ToolCalls,
		Tokens: a.Tokens - b.Tokens, Cost: a.Cost - b.Cost}
}

func minU(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: min(a.ModelRequests, b.ModelRequests), ToolCalls: min(a.ToolCalls, b.ToolCalls),
		Tokens: min(a.Tokens, b.Tokens), Cost: min(a.Cost, b.Cost)}
}

func maxU(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: max(a.ModelRequests, b.ModelRequests), ToolCalls: max(a.ToolCalls, b.ToolCalls),
		Tokens: max(a.Tokens, b.Tokens), Cost: max(a.Cost, b.Cost)}
}

// nonNeg clamps every unit at zero.
func nonNeg(a v1alpha1.Usage) v1alpha1.Usage { return maxU(a, v1alpha1.Usage{}) }

// less reports whether any unit of a is below b.
func less(a, b v1alpha1.Usage) bool {
	return a.ModelRequests < b.ModelRequests || a.ToolCalls < b.ToolCalls || a.Tokens < b.Tokens || a.Cost < b.Cost
}

// ---- Grants. ----

// grant turns absolute counters into a Grant; tokens and cost only when
// budgeted.
func (f *facts) grant(u v1alpha1.Usage, finalizeOnly bool) v1alpha1.Grant {
	g := v1alpha1.Grant{ModelRequests: u.ModelRequests, ToolCalls: u.ToolCalls, FinalizeOnly: finalizeOnly}
	if f.lim.tokens {
		t := u.Tokens
		g.Tokens = &t
	}
	if f.lim.cost {
		c := u.Cost
		g.Cost = &c
	}
	return g
}

// grantUsage is a Grant's counters (an unbudgeted unit as 0).
func grantUsage(g v1alpha1.Grant) v1alpha1.Usage {
	u := v1alpha1.Usage{ModelRequests: g.ModelRequests, ToolCalls: g.ToolCalls}
	if g.Tokens != nil {
		u.Tokens = *g.Tokens
	}
	if g.Cost != nil {
		u.Cost = *g.Cost
	}
	return u
}

// runningGrant is the working allowance of attempt a, in its own absolute
// counters: the working budget minus what the other attempts used, never
// negative and never more than its usage plus what is left.
func (f *facts) runningGrant(a attempt) v1alpha1.Grant {
	others := sub(f.used, a.own)
	g := nonNeg(sub(f.lim.working(), others))
	g = minU(g, add(a.own, nonNeg(f.remaining())))
	return f.grant(g, false)
}

// finalizeGrant is what attempt a may use once it finalizes from extra (what
// is left of the reserve): its usage so far plus extra.
func (f *facts) finalizeGrant(a attempt, extra v1alpha1.Usage) v1alpha1.Grant {
	return f.grant(add(a.own, extra), true)
}

// reserveLeft is what a finalization beginning now may spend: the output
// reserve, or what is left of it.
func (f *facts) reserveLeft() v1alpha1.Usage { return minU(f.lim.reserve, nonNeg(f.remaining())) }

// keptFinalizeGrant is the grant persisted when Finalizing began, lowered
// only if usage elsewhere left less than it promised.
func (f *facts) keptFinalizeGrant(a attempt) v1alpha1.Grant {
	g := minU(f.in.Status.Budget.Granted, add(a.own, nonNeg(f.remaining())))
	return f.grant(nonNeg(g), true)
}

// reserveIntact reports whether the whole output reserve is still
// available, with at least one model request in it.
func (f *facts) reserveIntact() bool {
	r, left := f.lim.reserve, f.remaining()
	return r.ModelRequests > 0 && r.ModelRequests <= left.ModelRequests && r.ToolCalls <= left.ToolCalls &&
		(!f.lim.tokens || r.Tokens <= left.Tokens) && (!f.lim.cost || r.Cost <= left.Cost)
}

// overGrant tells how the current attempt used more than it was granted, or
// returns "". The limit is the larger of the attempt's current grant and the
// working allowance it may have been given before: a grant lowered on
// entering Finalizing reaches the agent a moment later, and what it spent
// under the earlier grant in that moment is not a violation.
func (f *facts) overGrant() string {
	a := f.cur
	if !a.exists {
		return ""
	}
	u, g := add(a.facts.Status.Usage, f.childSpend(a.facts)), a.facts.Grant
	// An attempt started working unless it was started finalize-only, which
	// only ever replaces a failed attempt (so never attempt 1) when Finalizing
	// begins. Times have one-second resolution, hence the attempt-1 case.
	ft := f.in.Status.FinalizingTime
	if ft == nil || a.facts.Created.Before(ft.Time) || a.n == 1 {
		w := f.runningGrant(a)
		switch r, base := g.Reserve, a.facts.Status.FinalizeBase; {
		case r != nil && base != nil:
			// The gateway serves the reserve on top of the base it
			// recorded before it served any of it: the same grant it
			// admits by.
			w = EffectiveGrant(g, base)
		case r != nil:
			// A gateway that records no base (an older one) serves the
			// reserve on top of what it had admitted under the running
			// grant when it learned of Finalizing: at most the working
			// allowance plus the reserve.
			w = f.grant(nonNeg(sub(add(f.lim.working(), *r), sub(f.used, a.own))), false)
		}
		g.ModelRequests = max(g.ModelRequests, w.ModelRequests)
		g.ToolCalls = max(g.ToolCalls, w.ToolCalls)
		if g.Tokens != nil && w.Tokens != nil {
			t := max(*g.Tokens, *w.Tokens)
			g.Tokens = &t
		}
		if g.Cost != nil && w.Cost != nil {
			c := max(*g.Cost, *w.Cost)
			g.Cost = &c
		}
	}
	above := func(what string, used, granted int64) string {
		if used <= granted {
			return ""
		}
		return fmt.Sprintf("attempt %d reported %d %s, above its grant of %d", a.n, used, what, granted)
	}
	if s := above("model requests", u.ModelRequests, g.ModelRequests); s != "" {
		return s
	}
	if s := above("tool calls", u.ToolCalls, g.ToolCalls); s != "" {
		return s
	}
	if g.Tokens != nil {
		if s := above("tokens", u.Tokens, *g.Tokens); s != "" {
			return s
		}
	}
	if g.Cost != nil && u.Cost > *g.Cost {
		return fmt.Sprintf("attempt %d reported a cost of %s, above its grant of %s", a.n, u.Cost, *g.Cost)
	}
	return ""
}
