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
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestCostInGetWhyTop: a run that budgets cost shows it in get, why and top,
// as exact amounts.
func TestCostInGetWhyTop(t *testing.T) {
	now := fixtureTeamA(t)
	c, ctx, ns := cluster(t), context.Background(), "team-cost"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	rr := newRun(ns, "priced", "research", v1alpha1.Budget{ModelRequests: 8, ToolCalls: 10, Cost: new(v1alpha1.Money(5_000_000)),
		Deadline: minutes(20), OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 3, Cost: 500_000}})
	if err := c.Create(ctx, rr); err != nil {
		t.Fatal(err)
	}
	rr.Status = v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseFinalizing, Reason: v1alpha1.ReasonBudgetExhausted, Attempt: 1,
		StartTime: at(now).ago(10 * time.Minute),
		Budget: v1alpha1.BudgetStatus{
			Used:    v1alpha1.Usage{ModelRequests: 5, ToolCalls: 2, Tokens: 90000, Cost: 4_500_000},
			Granted: v1alpha1.Usage{ModelRequests: 7, ToolCalls: 9, Cost: 5_000_000}},
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: v1alpha1.Usage{ModelRequests: 5, ToolCalls: 2, Tokens: 90000, Cost: 4_500_000}}},
	}
	if err := c.Status().Update(ctx, rr); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string][]string{
		"get": {"5/7 req, 2/9 tools, 4.50/5.00 cost"},
		"why": {"cost reached the working allowance of 4.50 (budget 5.00 minus reserve 0.50); 4.50 used in all",
			"budget 5.00 minus reserve 0.50"},
		"top": {"COST", "4.50"},
	} {
		args := []string{cmd, "-n", ns}
		if cmd == "why" {
			args = append(args, "priced")
		}
		out, _, err := run(t, now, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s does not show %q:\n%s", cmd, w, out)
			}
		}
	}
}
