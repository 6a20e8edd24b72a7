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
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// completeRuns completes the first argument with the names of the runs in
// the namespace.
func (p *plugin) completeRuns(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return p.runNames(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeRunAndAction completes a run, then one of its pending actions.
func (p *plugin) completeRunAndAction(cmd *cobra.Command, args []string,
	prefix string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return p.runNames(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
	case 1:
		ns, c, err := p.target()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var rr v1alpha1.ResearchRun
		if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, &rr); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []string
		for _, a := range rr.Status.PendingApprovals {
			if strings.HasPrefix(a.ActionID, prefix) {
				out = append(out, a.ActionID+"\t"+a.Tool+", risk "+string(a.Risk))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func (p *plugin) runNames(cmd *cobra.Command, prefix string) []string {
	ns, c, err := p.target()
	if err != nil {
		return nil
	}
	var list v1alpha1.ResearchRunList
	if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []string
	for _, rr := range list.Items {
		if strings.HasPrefix(rr.Name, prefix) {
			out = append(out, rr.Name+"\t"+dash(string(rr.Status.Phase)))
		}
	}
	slices.Sort(out)
	return out
}
