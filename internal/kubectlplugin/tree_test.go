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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TestTree: a root, its two children and a grandchild, each with its phase,
// reason, carve, own use and its subtree's.
func TestTree(t *testing.T) {
	now := fixtureTeamA(t)
	c, ctx, ns := cluster(t), context.Background(), "team-tree"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	node := func(name string, parent *v1alpha1.ResearchRun, mr int64, st v1alpha1.ResearchRunStatus) *v1alpha1.ResearchRun {
		t.Helper()
		rr := newRun(ns, name, "s", v1alpha1.Budget{ModelRequests: mr, ToolCalls: 2, Cost: new(v1alpha1.Money(mr * 100_000))})
		if parent != nil {
			depth := int32(1)
			if parent.Spec.Parent != nil {
				depth = parent.Spec.Parent.Depth + 1
			}
			rr.Spec.Parent = &v1alpha1.ParentRef{Name: parent.Name, UID: string(parent.UID), Attempt: 1, Root: "survey", Depth: depth}
		}
		if err := c.Create(ctx, rr); err != nil {
			t.Fatal(err)
		}
		rr.Status = st
		if err := c.Status().Update(ctx, rr); err != nil {
			t.Fatal(err)
		}
		return rr
	}
	used := func(mr int64, cost v1alpha1.Money) v1alpha1.Usage {
		return v1alpha1.Usage{ModelRequests: mr, Cost: cost}
	}
	root := node("survey", nil, 20, v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning,
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: used(3, 300_000)}}, Budget: v1alpha1.BudgetStatus{Used: used(15, 1_500_000)}})
	node("survey-a", root, 4, v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseTerminated, Reason: v1alpha1.ReasonCompleted,
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: used(2, 200_000)}}, Budget: v1alpha1.BudgetStatus{Used: used(2, 200_000)}})
	b := node("survey-b", root, 10, v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning,
		Ledger: []v1alpha1.AttemptLedger{{Attempt: 1, Used: used(1, 100_000)}}, Budget: v1alpha1.BudgetStatus{Used: used(5, 500_000)}})
	node("survey-b-x", b, 4, v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning})

	out, _, err := run(t, now, nil, "tree", "-n", ns, "survey")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NAME", "BUDGET", "OWN", "TREE",
		"survey ", "20 req, 2 tools, 2.00", "3 req, 0 tools, 0.30", "15 req, 0 tools, 1.50",
		"├─ survey-a", "Completed", "└─ survey-b ", "   └─ survey-b-x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tree does not show %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
}
