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
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// TopOptions select the runs Top sums.
type TopOptions struct {
	Namespace     string
	AllNamespaces bool
	// ErrOut receives "No resources found"; nil: w.
	ErrOut io.Writer
}

// usageRow sums the runs of one session.
type usageRow struct {
	namespace, session string
	runs, active       int
	used               v1alpha1.Usage
	steps              int64
}

func (r *usageRow) add(o usageRow) {
	r.runs += o.runs
	r.active += o.active
	r.used.ModelRequests += o.used.ModelRequests
	r.used.ToolCalls += o.used.ToolCalls
	r.used.Tokens += o.used.Tokens
	r.used.Cost += o.used.Cost
	r.steps += o.steps
}

// Top prints usage by namespace and session: the sum of status.budget.used
// and steps over the session's runs, how many runs it has and how many are
// active (Running, Recovering or Finalizing). A namespace with more than
// one session gets a total row.
func Top(ctx context.Context, w io.Writer, c client.Reader, o TopOptions) error {
	var list v1alpha1.ResearchRunList
	var opts []client.ListOption
	if !o.AllNamespaces {
		opts = append(opts, client.InNamespace(o.Namespace))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		errOut := cmp.Or[io.Writer](o.ErrOut, w)
		if o.AllNamespaces {
			_, _ = fmt.Fprintln(errOut, "No resources found")
		} else {
			_, _ = fmt.Fprintf(errOut, "No resources found in %s namespace.\n", o.Namespace)
		}
		return nil
	}
	rows := map[[2]string]*usageRow{}
	for i := range list.Items {
		rr := &list.Items[i]
		key := [2]string{rr.Namespace, rr.Spec.SessionRef.Name}
		r := rows[key]
		if r == nil {
			r = &usageRow{namespace: key[0], session: key[1]}
			rows[key] = r
		}
		one := usageRow{runs: 1, used: rr.Status.Budget.Used, steps: rr.Status.Steps}
		if rr.Status.Phase.IsActive() {
			one.active = 1
		}
		r.add(one)
	}
	sorted := make([]*usageRow, 0, len(rows))
	for _, r := range rows {
		sorted = append(sorted, r)
	}
	slices.SortFunc(sorted, func(a, b *usageRow) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.session, b.session))
	})
	// COST only when some run has one (in its policy's currency).
	costly := slices.ContainsFunc(sorted, func(r *usageRow) bool { return r.used.Cost > 0 })
	header := []string{"NAMESPACE", "SESSION", "RUNS", "ACTIVE", "MODEL REQUESTS", "TOOL CALLS", "TOKENS", "STEPS"}
	if costly {
		header = slices.Insert(header, 7, "COST")
	}
	t := newTable(w, "", header...)
	line := func(r *usageRow) {
		row := []string{r.namespace, r.session, fmt.Sprint(r.runs), fmt.Sprint(r.active), itoa(r.used.ModelRequests),
			itoa(r.used.ToolCalls), itoa(r.used.Tokens), itoa(r.steps)}
		if costly {
			row = slices.Insert(row, 7, r.used.Cost.String())
		}
		t.row(row...)
	}
	for i := 0; i < len(sorted); {
		j := i
		total := usageRow{namespace: sorted[i].namespace, session: "(total)"}
		for ; j < len(sorted) && sorted[j].namespace == sorted[i].namespace; j++ {
			line(sorted[j])
			total.add(*sorted[j])
		}
		if j-i > 1 {
			line(&total)
		}
		i = j
	}
	t.flush()
	return nil
}

func (p *plugin) topCommand() *cobra.Command {
	var o TopOptions
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show usage by namespace and session: model requests, tool calls, tokens, steps, active runs",
		Example: `  kubectl agentrun top
  kubectl agentrun top -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			o.Namespace, o.ErrOut = ns, p.Streams.ErrOut
			return Top(cmd.Context(), p.Streams.Out, c, o)
		},
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "sum the runs of every namespace")
	return cmd
}
