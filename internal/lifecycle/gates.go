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
	"slices"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// reading is how close the run is to one gate's hard limit.
type reading struct {
	gate   v1alpha1.Gate
	reason v1alpha1.Reason // the run's reason when the limit is reached
	value  int64           // where the run is (nanoseconds for the deadline)
	limit  int64           // the hard limit, in the same unit
	state  string          // the numbers, e.g. "3/4 steps"
	cause  string          // the sentence used when the limit is reached
}

// hard reports whether the gate is at its hard limit.
func (r reading) hard() bool { return r.value >= r.limit }

// readings measures every gate for attempt a, in precedence order: working
// budget (model requests, tool calls if the working allowance has any,
// tokens if budgeted), deadline, steps, repeated call, no progress.
func (f *facts) readings(a attempt) []reading {
	var rs []reading
	w := f.lim.working()
	budget := func(unit string, used, limit int64) reading {
		return reading{
			gate: v1alpha1.GateBudget, reason: v1alpha1.ReasonBudgetExhausted, value: used, limit: limit,
			state: fmt.Sprintf("%d/%d %s", used, max(limit, 0), unit),
			cause: fmt.Sprintf("working budget exhausted at %d/%d %s", used, max(limit, 0), unit),
		}
	}
	// The budgets unfinished children hold are committed, not spent: a
	// parent that carved its working allowance waits for its children
	// rather than finalizing (and finalizing them) at once.
	used := sub(f.used, f.held)
	rs = append(rs, budget("model requests", used.ModelRequests, w.ModelRequests))
	if w.ToolCalls > 0 {
		rs = append(rs, budget("tool calls", used.ToolCalls, w.ToolCalls))
	}
	if f.lim.tokens {
		rs = append(rs, budget("tokens", used.Tokens, w.Tokens))
	}
	if f.lim.cost {
		rs = append(rs, costReading(used.Cost, w.Cost))
	}
	if x := a.facts.Status.GrantExhausted; x != nil && !a.facts.Grant.FinalizeOnly {
		// The gateway refused a request on the working grant: exhaustion is
		// that fact, whatever the counters say (a token grant can have
		// tokens left and still fit no request's bound).
		at := fmt.Sprintf("%d/%d %s", x.Used, x.Granted, unitName(x.Unit))
		if x.Unit == v1alpha1.BudgetUnitCost {
			at = fmt.Sprintf("a cost of %s/%s", v1alpha1.Money(x.Used), v1alpha1.Money(x.Granted))
		}
		rs = append(rs, reading{
			gate: v1alpha1.GateBudget, reason: v1alpha1.ReasonBudgetExhausted, value: 1, limit: 1,
			state: "a request refused at " + at,
			cause: fmt.Sprintf("working budget exhausted: the gateway refused attempt %d a request at %s of its grant", a.n, at),
		})
	}
	if f.startTime != nil {
		elapsed := f.now.Sub(f.startTime.Time)
		rs = append(rs, reading{
			gate: v1alpha1.GateDeadline, reason: v1alpha1.ReasonDeadlineExceeded,
			value: int64(elapsed), limit: int64(f.lim.deadline),
			state: fmt.Sprintf("%s of the %s deadline elapsed", dur(elapsed), dur(f.lim.deadline)),
			cause: fmt.Sprintf("the %s deadline passed (%s since start)", dur(f.lim.deadline), dur(elapsed)),
		})
	}
	steps, maxSteps := f.steps, int64(f.lim.maxSteps)
	rs = append(rs, reading{
		gate: v1alpha1.GateSteps, reason: v1alpha1.ReasonStepLimit, value: steps, limit: maxSteps,
		state: fmt.Sprintf("%d/%d steps", steps, maxSteps),
		cause: fmt.Sprintf("step limit reached at %d/%d steps", steps, maxSteps),
	})
	call, sameLimit := maxSameCall(a), int64(f.lim.sameCall)
	rs = append(rs, reading{
		gate: v1alpha1.GateSameCall, reason: v1alpha1.ReasonRepeatedCall, value: call.Count, limit: sameLimit,
		state: fmt.Sprintf("%d/%d identical %scalls", call.Count, sameLimit, toolPrefix(call.Tool)),
		cause: fmt.Sprintf("the same %scall repeated %d/%d times", toolPrefix(call.Tool), call.Count, sameLimit),
	})
	idle, idleLimit := stepsWithoutProgress(a), int64(f.lim.noProgress)
	rs = append(rs, reading{
		gate: v1alpha1.GateNoProgress, reason: v1alpha1.ReasonNoProgress, value: idle, limit: idleLimit,
		state: fmt.Sprintf("%d/%d steps without progress", idle, idleLimit),
		cause: fmt.Sprintf("no progress for %d/%d steps", idle, idleLimit),
	})
	return rs
}

// unitName is how a message names a budget unit.
func unitName(u v1alpha1.BudgetUnit) string {
	switch u {
	case v1alpha1.BudgetUnitModelRequests:
		return "model requests"
	case v1alpha1.BudgetUnitToolCalls:
		return "tool calls"
	}
	return "tokens"
}

func toolPrefix(tool string) string {
	if tool == "" {
		return ""
	}
	return tool + " "
}

// hardGate is the first gate at its hard limit for attempt a, if any.
func (f *facts) hardGate(a attempt) (reading, bool) {
	for _, r := range f.readings(a) {
		if r.hard() {
			return r, true
		}
	}
	return reading{}, false
}

// directives are what attempt a should do as gates come close: Degrade
// from degradeAtPercent of a limit, Compress (as well) from
// compressAtPercent. A gate with a limit of 1 or less gets none.
func (f *facts) directives(a attempt) []v1alpha1.Directive {
	var ds []v1alpha1.Directive
	steps := []struct {
		typ v1alpha1.DirectiveType
		pct int32
	}{{v1alpha1.DirectiveDegrade, f.lim.degradePct}, {v1alpha1.DirectiveCompress, f.lim.compressPct}}
	for _, r := range f.readings(a) {
		if r.hard() || r.limit <= 1 {
			continue
		}
		for _, s := range steps {
			published := slices.ContainsFunc(ds, func(d v1alpha1.Directive) bool { return d.Gate == r.gate && d.Type == s.typ })
			if r.value >= threshold(s.pct, r.limit) && !published {
				ds = append(ds, v1alpha1.Directive{Type: s.typ, Gate: r.gate, Message: r.state})
			}
		}
	}
	return ds
}

// threshold is where a directive starts: ceil(limit·pct/100), but below the
// limit itself. Computed without overflow for any int64 limit ≥ 0.
func threshold(pct int32, limit int64) int64 {
	pc := int64(pct)
	return min(limit-1, limit/100*pc+(limit%100*pc+99)/100)
}

// stepsWithoutProgress is measured on one attempt.
func stepsWithoutProgress(a attempt) int64 {
	return max(0, a.facts.Status.Steps-a.facts.Status.LastProgressStep)
}

// maxSameCall is an attempt's most repeated call fingerprint.
func maxSameCall(a attempt) v1alpha1.CallCount {
	var best v1alpha1.CallCount
	for _, c := range a.facts.Status.Calls {
		if c.Count > best.Count {
			best = c
		}
	}
	return best
}

// costReading is the working budget's cost: exhausted once the cost used
// reaches the working cost (budget minus reserve). The figures are exact
// amounts in the policy's currency.
func costReading(used, limit v1alpha1.Money) reading {
	state := fmt.Sprintf("a cost of %s/%s", used, max(limit, 0))
	return reading{
		gate: v1alpha1.GateBudget, reason: v1alpha1.ReasonBudgetExhausted, value: int64(used), limit: int64(limit),
		state: state, cause: "working budget exhausted at " + state,
	}
}
