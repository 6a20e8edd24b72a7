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
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// money reads an amount for a test; a malformed one fails the test run.
func money(s string) v1alpha1.Money {
	m, err := v1alpha1.ParseMoney(s)
	if err != nil {
		panic(err)
	}
	return m
}

// costly is a run budgeted "5.00" with a reserve of "0.50", on attempt 1's
// working grant of "4.50" (and the model requests and tool calls of testSpec).
func costly(in *Input) {
	in.Spec.Budget.Cost = new(money("5.00"))
	in.Spec.Budget.OutputReserve.Cost = money("0.50")
	for i := range in.Attempts {
		in.Attempts[i].Grant.Cost = new(money("4.50"))
	}
}

// spent is a usage of 3 model requests costing s.
func spent(s string) v1alpha1.Usage { return v1alpha1.Usage{ModelRequests: 3, Cost: money(s)} }

// TestDecideCost is the cost gate: cost is a unit of the budget like tokens,
// decided from the facts (cost used against the working cost).
func TestDecideCost(t *testing.T) {
	workingCost := working
	workingCost.Cost = new(money("4.50"))
	finalCost := v1alpha1.Grant{ModelRequests: 5, ToolCalls: 2, Cost: new(money("5.00")), FinalizeOnly: true}
	runDecideCases(t, map[string]decideCase{
		"cost: the working grant carries the working cost (budget minus reserve)": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("1.20"), Steps: 2, LastProgressStep: 2})), costly),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: workingCost, RequeueAfter: 60 * time.Second,
				Conditions: []string{readyTrue}},
			check: func(t *testing.T, d Decision) {
				if got, want := d.Status.Budget.Used.Cost, money("1.20"); got != want {
					t.Errorf("used cost %s, want %s", got, want)
				}
				if got, want := d.Status.Budget.Remaining.Cost, money("3.80"); got != want {
					t.Errorf("remaining cost %s, want %s (reserve included)", got, want)
				}
				if got, want := d.Status.Budget.Granted.Cost, money("4.50"); got != want {
					t.Errorf("granted cost %s, want %s", got, want)
				}
			},
		},
		"cost: the working cost spent → Finalizing/BudgetExhausted from the reserve, in money too": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("4.50"), Steps: 4, LastProgressStep: 4})), costly),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant: finalCost, RequeueAfter: 60 * time.Second, Events: []string{evFinalizing},
				Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "working budget exhausted at a cost of 4.50/4.50; finalizing from the reserve of 2 model requests " +
				"and 2 tool calls and a cost of 0.50",
		},
		"cost: one micro-unit below the working cost keeps running, degraded and compressed": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("4.499999"), Steps: 4, LastProgressStep: 4})),
				costly),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: workingCost, RequeueAfter: 60 * time.Second,
				Directives: []string{"Degrade/Budget: a cost of 4.499999/4.50", "Compress/Budget: a cost of 4.499999/4.50"},
				Conditions: []string{readyTrue}},
		},
		"cost: a request the gateway refused on the cost grant exhausts it": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("4.30"), Steps: 4, LastProgressStep: 4,
				GrantExhausted: &v1alpha1.GrantExhaustion{Unit: v1alpha1.BudgetUnitCost, Used: 4_300_000, Granted: 4_500_000}})), costly),
			want: outcome{Rung: rungGates, Phase: finalizing, Reason: v1alpha1.ReasonBudgetExhausted, StatusAttempt: 1, Attempt: 1,
				Grant:        v1alpha1.Grant{ModelRequests: 5, ToolCalls: 2, Cost: new(money("4.80")), FinalizeOnly: true},
				RequeueAfter: 60 * time.Second, Events: []string{evFinalizing},
				Conditions: []string{finalizingFor(v1alpha1.ReasonBudgetExhausted), readyFinal}},
			message: "the gateway refused attempt 1 a request at a cost of 4.30/4.50 of its grant",
		},
		"cost: a cost above the grant is a violation": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("4.60")})), costly),
			want: outcome{Rung: rungPolicyViolation, Phase: running, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "attempt 1 reported a cost of 4.60, above its grant of 4.50",
		},
		"cost: a cost going back is a violation": {
			in: with(runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("1.00"), Steps: 2})), costly,
				func(in *Input) {
					in.Status.Ledger = []v1alpha1.AttemptLedger{{Attempt: 1, Used: spent("1.25"), Steps: 2}}
				}),
			want: outcome{Rung: rungPolicyViolation, Phase: running, Reason: v1alpha1.ReasonPolicyViolation, StatusAttempt: 1,
				DeletePod: true, RequeueAfter: StopPollInterval, Events: []string{evStopping}, Conditions: []string{readyStop}},
			message: "attempt 1 reported a cost of 1.00 after 1.25",
		},
		"cost: not budgeted, a reported cost is shown but ends nothing": {
			in: runningAt(time.Minute, fact(1, v1alpha1.RunAttemptStatus{Usage: spent("999.00"), Steps: 2, LastProgressStep: 2})),
			want: outcome{Rung: rungSteady, Phase: running, StatusAttempt: 1, Attempt: 1, Grant: working, RequeueAfter: 60 * time.Second,
				Conditions: []string{readyTrue}},
			check: func(t *testing.T, d Decision) {
				if d.Status.Budget.Used.Cost != money("999.00") || d.Status.Budget.Remaining.Cost != 0 {
					t.Errorf("used %s, remaining %s: want the cost shown and nothing remaining of an unbudgeted unit",
						d.Status.Budget.Used.Cost, d.Status.Budget.Remaining.Cost)
				}
			},
		},
	})
}

func TestEffectiveGrantCost(t *testing.T) {
	g := v1alpha1.Grant{ModelRequests: 6, Cost: new(money("4.00")), FinalizeOnly: true,
		Reserve: &v1alpha1.Usage{ModelRequests: 2, Cost: money("0.50")}}
	got := EffectiveGrant(g, &v1alpha1.Usage{ModelRequests: 6, Cost: money("4.20")})
	if got.Cost == nil || *got.Cost != money("4.70") {
		t.Errorf("cost grant %v, want the reserve of 0.50 on top of the base of 4.20", got.Cost)
	}
}
