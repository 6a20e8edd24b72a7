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
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The -o formats of get.
const (
	formatJSON = "json"
	formatYAML = "yaml"
)

// GetOptions select the runs Get lists.
type GetOptions struct {
	// Namespace of the runs; ignored with AllNamespaces.
	Namespace     string
	AllNamespaces bool
	// Name of one run; empty lists them all.
	Name string
	// Output is "" (a table), "json" or "yaml".
	Output string
	// Now is the clock of the AGE column.
	Now time.Time
	// ErrOut receives "No resources found" (kubectl's habit); nil: w.
	ErrOut io.Writer
}

// Get prints runs as a table (NAME, SESSION, PHASE, REASON, BUDGET, STEPS,
// APPROVALS, AGE), or the objects as JSON or YAML.
func Get(ctx context.Context, w io.Writer, c client.Reader, o GetOptions) error {
	if o.Output != "" && o.Output != formatJSON && o.Output != formatYAML {
		return fmt.Errorf("unknown output format %q: want json or yaml (or none for the table)", o.Output)
	}
	var runs []v1alpha1.ResearchRun
	if o.Name != "" {
		var rr v1alpha1.ResearchRun
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, &rr); err != nil {
			return err
		}
		runs = []v1alpha1.ResearchRun{rr}
	} else {
		var list v1alpha1.ResearchRunList
		var opts []client.ListOption
		if !o.AllNamespaces {
			opts = append(opts, client.InNamespace(o.Namespace))
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return err
		}
		runs = list.Items
		slices.SortFunc(runs, func(a, b v1alpha1.ResearchRun) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	if o.Output != "" {
		return printObjects(w, runs, o.Name != "", o.Output)
	}
	if len(runs) == 0 {
		errOut := o.ErrOut
		if errOut == nil {
			errOut = w
		}
		if o.AllNamespaces {
			_, _ = fmt.Fprintln(errOut, "No resources found")
		} else {
			_, _ = fmt.Fprintf(errOut, "No resources found in %s namespace.\n", o.Namespace)
		}
		return nil
	}
	header := []string{"NAME", "SESSION", "PHASE", "REASON", "BUDGET", "STEPS", "APPROVALS", "AGE"}
	if o.AllNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	t := newTable(w, "", header...)
	for i := range runs {
		rr := &runs[i]
		st := rr.Status
		row := []string{rr.Name, rr.Spec.SessionRef.Name, dash(string(st.Phase)), dash(string(st.Reason)),
			budgetCell(rr), itoa(st.Steps), fmt.Sprint(len(st.PendingApprovals)), age(rr.CreationTimestamp, o.Now)}
		if o.AllNamespaces {
			row = append([]string{rr.Namespace}, row...)
		}
		t.row(row...)
	}
	t.flush()
	return nil
}

// granted is what the run's counters are measured against, in the run's
// counters: the grant of its current attempt (status.budget.granted counts
// that attempt's own usage) plus what its other attempts used, or the
// budget when no grant was given (before the first attempt).
func granted(rr *v1alpha1.ResearchRun) v1alpha1.Usage {
	g := rr.Status.Budget.Granted
	if g == (v1alpha1.Usage{}) {
		g = v1alpha1.Usage{ModelRequests: rr.Spec.Budget.ModelRequests, ToolCalls: rr.Spec.Budget.ToolCalls}
		if rr.Spec.Budget.Tokens != nil {
			g.Tokens = *rr.Spec.Budget.Tokens
		}
		if rr.Spec.Budget.Cost != nil {
			g.Cost = *rr.Spec.Budget.Cost
		}
		return g
	}
	for _, l := range rr.Status.Ledger {
		if l.Attempt != rr.Status.Attempt {
			g.ModelRequests += l.Used.ModelRequests
			g.ToolCalls += l.Used.ToolCalls
			g.Tokens += l.Used.Tokens
			g.Cost += l.Used.Cost
		}
	}
	return g
}

// budgetCell is "7/8 req, 2/3 tools": model requests and tool calls used
// of granted, and ", 1.20/4.50 cost" for a run that budgets cost.
func budgetCell(rr *v1alpha1.ResearchRun) string {
	u, g := rr.Status.Budget.Used, granted(rr)
	s := fmt.Sprintf("%d/%d req, %d/%d tools", u.ModelRequests, g.ModelRequests, u.ToolCalls, g.ToolCalls)
	if rr.Spec.Budget.Cost != nil {
		s += fmt.Sprintf(", %s/%s cost", u.Cost, g.Cost)
	}
	return s
}

// printObjects passes the objects through as JSON or YAML: one object for
// a named run, else a List, as kubectl prints them (without managedFields).
func printObjects(w io.Writer, runs []v1alpha1.ResearchRun, single bool, format string) error {
	gvk := v1alpha1.GroupVersion.WithKind("ResearchRun")
	for i := range runs {
		runs[i].SetGroupVersionKind(gvk)
		runs[i].ManagedFields = nil
	}
	var obj any
	if single {
		obj = &runs[0]
	} else {
		list := &v1alpha1.ResearchRunList{Items: runs}
		if list.Items == nil {
			list.Items = []v1alpha1.ResearchRun{}
		}
		list.APIVersion, list.Kind = "v1", "List"
		obj = list
	}
	var data []byte
	var err error
	if format == formatJSON {
		data, err = json.MarshalIndent(obj, "", "    ")
		data = append(data, '\n')
	} else {
		data, err = yaml.Marshal(obj)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (p *plugin) getCommand() *cobra.Command {
	var o GetOptions
	cmd := &cobra.Command{
		Use:   "get [RUN]",
		Short: "List research runs with their budget, steps and pending approvals",
		Example: `  kubectl agentrun get
  kubectl agentrun get -A
  kubectl agentrun get survey-vector-dbs -o yaml`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: p.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if o.AllNamespaces {
					return fmt.Errorf("a run name cannot be combined with --all-namespaces")
				}
				o.Name = args[0]
			}
			o.Namespace, o.Now, o.ErrOut = ns, p.now(), p.Streams.ErrOut
			return Get(cmd.Context(), p.Streams.Out, c, o)
		},
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the runs of every namespace")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format: json or yaml (the objects)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{formatJSON, formatYAML},
		cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
