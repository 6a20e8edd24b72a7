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
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Tree prints run name's tree of child runs (docs/children.md): each node's
// phase and reason, the budget its parent carved for it (a root: its own
// budget), what it used itself (its attempts' ledger) and what its whole
// subtree holds or used (status.budget.used: its own use plus its
// children's carves until they end, then what they used).
func Tree(ctx context.Context, w io.Writer, c client.Reader, namespace, name string) error {
	root := &v1alpha1.ResearchRun{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, root); err != nil {
		return err
	}
	var list v1alpha1.ResearchRunList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return err
	}
	kids := map[string][]*v1alpha1.ResearchRun{}
	for i := range list.Items {
		if p := list.Items[i].Spec.Parent; p != nil {
			kids[p.UID] = append(kids[p.UID], &list.Items[i])
		}
	}
	t := newTable(w, "", "NAME", "PHASE", "REASON", "BUDGET", "OWN", "TREE")
	var walk func(rr *v1alpha1.ResearchRun, prefix, branch string)
	walk = func(rr *v1alpha1.ResearchRun, prefix, branch string) {
		var own v1alpha1.Usage
		for _, e := range rr.Status.Ledger {
			own = addUsage(own, e.Used)
		}
		t.row(prefix+branch+rr.Name, dash(string(rr.Status.Phase)), dash(string(rr.Status.Reason)),
			brief(budgetUsage(rr.Spec.Budget)), brief(own), brief(rr.Status.Budget.Used))
		next := kids[string(rr.UID)]
		slices.SortFunc(next, func(a, b *v1alpha1.ResearchRun) int { return strings.Compare(a.Name, b.Name) })
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		for i, k := range next {
			b := "├─ "
			if i == len(next)-1 {
				b = "└─ "
			}
			walk(k, prefix, b)
		}
	}
	walk(root, "", "")
	t.flush()
	return nil
}

// brief is "7 req, 2 tools" with tokens and cost when set.
func brief(u v1alpha1.Usage) string {
	s := fmt.Sprintf("%d req, %d tools", u.ModelRequests, u.ToolCalls)
	if u.Tokens > 0 {
		s += fmt.Sprintf(", %d tokens", u.Tokens)
	}
	if u.Cost > 0 {
		s += ", " + u.Cost.String()
	}
	return s
}

func budgetUsage(b v1alpha1.Budget) v1alpha1.Usage {
	u := v1alpha1.Usage{ModelRequests: b.ModelRequests, ToolCalls: b.ToolCalls}
	if b.Tokens != nil {
		u.Tokens = *b.Tokens
	}
	if b.Cost != nil {
		u.Cost = *b.Cost
	}
	return u
}

func addUsage(a, b v1alpha1.Usage) v1alpha1.Usage {
	return v1alpha1.Usage{ModelRequests: a.ModelRequests + b.ModelRequests, ToolCalls: a.ToolCalls + b.ToolCalls,
		Tokens: a.Tokens + b.Tokens, Cost: a.Cost + b.Cost}
}

func (p *plugin) treeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "tree RUN",
		Short: "Show a run's tree of child runs: phase, reason, budget carved, own use and the subtree's use",
		Example: `  kubectl agentrun tree survey
  kubectl agentrun tree survey -n team-a`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			return Tree(cmd.Context(), p.Streams.Out, c, ns, args[0])
		},
	}
}
