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
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Defaults used when a spec field is unset. They are the API's
// +kubebuilder:default values, so a run the API server defaulted and a run
// built in a test decide alike.
const (
	DefaultDeadline          = 30 * time.Minute
	DefaultFinalizationGrace = 2 * time.Minute
	DefaultBackoff           = 5 * time.Second
	DefaultHeartbeatTimeout  = 60 * time.Second
	DefaultStartTimeout      = 5 * time.Minute
	DefaultMaxAttempts       = int32(3)
	DefaultMaxSteps          = int32(20)
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
		},
	}
	if l.tokens {
		l.budget.Tokens = *b.Tokens
	} else {
		l.reserve.Tokens = 0
	}
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
	return v1alpha1.Usage{ModelRequests: a.ModelRequests + b.ModelRequests, ToolCalls: a.ToolCalls + b.ToolCalls, Tokens: a.Tokens + b.Tokens}
}

func sub(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: a.ModelRequests - b.ModelRequests, ToolCalls: a.ToolCalls - b.ToolCalls, Tokens: a.Tokens - b.Tokens}
}

func minU(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: min(a.ModelRequests, b.ModelRequests), ToolCalls: min(a.ToolCalls, b.ToolCalls), Tokens: min(a.Tokens, b.Tokens)}
}

func maxU(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: max(a.ModelRequests, b.ModelRequests), ToolCalls: max(a.ToolCalls, b.ToolCalls), Tokens: max(a.Tokens, b.Tokens)}
}

// nonNeg clamps every unit at zero.
func nonNeg(a v1alpha1.Usage) v1alpha1.Usage { return maxU(a, v1alpha1.Usage{}) }

// less reports whether any unit of a is below b.
func less(a, b v1alpha1.Usage) bool {
	return a.ModelRequests < b.ModelRequests || a.ToolCalls < b.ToolCalls || a.Tokens < b.Tokens
}
