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
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// DecideOptions are one answer to a pending action.
type DecideOptions struct {
	Namespace string
	Run       string
	ActionID  string
	Decision  v1alpha1.ApprovalDecision
	// Comment is kept with the decision (for Deny: the reason).
	Comment string
	// Force records the decision although the action is not among the
	// run's status.pendingApprovals.
	Force bool
	// Standing makes an approval admit every identical call of the attempt
	// (scope Standing) instead of one (Once).
	Standing bool
	// ArgumentsSHA256 names the full redacted arguments approved; required
	// when the pending request's arguments were too long to be shown.
	ArgumentsSHA256 string
}

// Approve appends a decision to the run's spec.approvals with a JSON patch
// (add /spec/approvals/-); the admission webhook stamps approver and time.
// It refuses an action the run does not wait on unless Force is set.
func Approve(ctx context.Context, w io.Writer, c client.Client, o DecideOptions) error {
	if o.Decision != v1alpha1.DecisionApprove && o.Decision != v1alpha1.DecisionDeny {
		return fmt.Errorf("decision %q: want Approve or Deny", o.Decision)
	}
	if o.ActionID == "" {
		return fmt.Errorf("an action id is required")
	}
	var rr v1alpha1.ResearchRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Run}, &rr); err != nil {
		return err
	}
	pending := rr.Status.PendingApprovals
	i := slices.IndexFunc(pending, func(p v1alpha1.ApprovalRequest) bool { return p.ActionID == o.ActionID })
	if i < 0 && !o.Force {
		waiting := "no action waits for a decision"
		if len(pending) > 0 {
			waiting = "pending: " + strings.Join(v1alpha1.ActionIDs(pending), ", ")
		}
		return fmt.Errorf("action %q is not pending on researchrun %s/%s (%s); "+
			"a decision for it would change nothing (pass --force to record it anyway)",
			o.ActionID, o.Namespace, o.Run, waiting)
	}
	if o.Decision == v1alpha1.DecisionApprove && i >= 0 {
		if err := checkArgumentsHash(pending[i], o.ArgumentsSHA256); err != nil {
			return fmt.Errorf("researchrun %s/%s: %w", o.Namespace, o.Run, err)
		}
	}
	entry := v1alpha1.Approval{ActionID: o.ActionID, Decision: o.Decision, Comment: o.Comment}
	if o.Decision == v1alpha1.DecisionApprove {
		entry.Scope, entry.ArgumentsSHA256 = v1alpha1.ApprovalScopeOnce, o.ArgumentsSHA256
		if o.Standing {
			entry.Scope = v1alpha1.ApprovalScopeStanding
		}
	}
	before := len(rr.Spec.Approvals)
	patch, err := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/approvals/-", "value": entry}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, &rr, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("recording the decision on researchrun %s/%s: %w", o.Namespace, o.Run, err)
	}
	verb := map[v1alpha1.ApprovalDecision]string{v1alpha1.DecisionApprove: "approved",
		v1alpha1.DecisionDeny: "denied"}[o.Decision]
	line := fmt.Sprintf("researchrun %s/%s: %s %s", o.Namespace, o.Run, verb, o.ActionID)
	if i >= 0 {
		p := pending[i]
		line += fmt.Sprintf(" (tool %s, risk %s, attempt %d)", p.Tool, dash(string(p.Risk)), p.Attempt)
		if entry.Scope == v1alpha1.ApprovalScopeStanding {
			line += fmt.Sprintf("; standing: every identical call of attempt %d runs without asking", p.Attempt)
		}
	} else {
		line += " (not pending: recorded because of --force)"
	}
	_, _ = fmt.Fprintln(w, line)
	// The patched object is the API server's answer: the entry as stored,
	// with the approver and time the webhook stamped.
	if n := len(rr.Spec.Approvals); n > before {
		stored := rr.Spec.Approvals[n-1]
		who := "approver not stamped (no admission webhook answered)"
		if stored.Approver != "" {
			who = "approver " + stored.Approver
		}
		detail := fmt.Sprintf("  spec.approvals[%d]: %s", n-1, who)
		if stored.Comment != "" {
			detail += fmt.Sprintf(", comment %q", stored.Comment)
		}
		_, _ = fmt.Fprintln(w, detail)
	}
	return nil
}

// checkArgumentsHash refuses to approve a request whose arguments were too
// long to be shown in full unless the approver names their hash, and any
// hash that is not the request's.
func checkArgumentsHash(p v1alpha1.ApprovalRequest, hash string) error {
	switch {
	case hash != "" && p.ArgumentsSHA256 != "" && hash != p.ArgumentsSHA256:
		return fmt.Errorf("--arguments-sha256 %s is not the hash of action %s's arguments (%s): you would approve other arguments than the call's",
			hash, p.ActionID, p.ArgumentsSHA256)
	case p.ArgumentsTruncated && hash == "":
		return fmt.Errorf("action %s's arguments are %d bytes, more than the %d shown (status.pendingApprovals[].arguments), "+
			"so nobody saw them in full: read them where they were made and pass --arguments-sha256 with the SHA-256 of the "+
			"full redacted arguments (%s) to approve them", p.ActionID, p.ArgumentsBytes, v1alpha1.MaxApprovalArguments, p.ArgumentsSHA256)
	}
	return nil
}

// StopOptions name the run Stop asks to end.
type StopOptions struct {
	Namespace string
	Run       string
	Stop      v1alpha1.StopRequest
}

// Stop sets spec.stop (Cancel or Finalize) with a merge patch.
func Stop(ctx context.Context, w io.Writer, c client.Client, o StopOptions) error {
	if o.Stop != v1alpha1.StopCancel && o.Stop != v1alpha1.StopFinalize {
		return fmt.Errorf("stop %q: want Cancel or Finalize", o.Stop)
	}
	var rr v1alpha1.ResearchRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Run}, &rr); err != nil {
		return err
	}
	ref := fmt.Sprintf("researchrun %s/%s", o.Namespace, o.Run)
	switch {
	case rr.Status.Phase == v1alpha1.PhaseTerminated:
		_, _ = fmt.Fprintf(w, "%s is already Terminated (%s): nothing to stop\n", ref, rr.Status.Reason)
		return nil
	case rr.Spec.Stop == o.Stop:
		_, _ = fmt.Fprintf(w, "%s: spec.stop is already %s\n", ref, o.Stop)
		return nil
	case rr.Spec.Stop == v1alpha1.StopCancel:
		return fmt.Errorf("%s: spec.stop is Cancel, which cannot be lowered to Finalize", ref)
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"stop": o.Stop}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, &rr, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting spec.stop on %s: %w", ref, err)
	}
	what := "it ends at once; nothing more is spent"
	if o.Stop == v1alpha1.StopFinalize {
		what = "it wraps up from its output reserve"
		if rr.Status.StartTime == nil {
			what = "it has not started, so it ends as Cancelled"
		}
	}
	_, _ = fmt.Fprintf(w, "%s: stop requested: %s (%s)\n", ref, o.Stop, what)
	return nil
}

func (p *plugin) decideCommand(d v1alpha1.ApprovalDecision) *cobra.Command {
	o := DecideOptions{Decision: d}
	cmd := &cobra.Command{
		Use:   "approve RUN ACTION",
		Short: "Approve an action a run waits on (appends to spec.approvals)",
		Example: `  kubectl agentrun approve survey-vector-dbs report.publish-3f9a0c1d2e4b5a69 --comment "ship it"
  kubectl agentrun approve survey-vector-dbs mail.send-0b1c2d3e4f5a6b7c --force
  kubectl agentrun approve survey-vector-dbs http.post-0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e --standing`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: p.completeRunAndAction,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			o.Namespace, o.Run, o.ActionID = ns, args[0], args[1]
			return Approve(cmd.Context(), p.Streams.Out, c, o)
		},
	}
	if d == v1alpha1.DecisionDeny {
		cmd.Use = "deny RUN ACTION"
		cmd.Short = "Deny an action a run waits on (appends to spec.approvals)"
		cmd.Example = `  kubectl agentrun deny survey-vector-dbs mail.send-0b1c2d3e4f5a6b7c --reason "not yet"`
		cmd.Flags().StringVar(&o.Comment, "reason", "", "why it is denied (kept as the decision's comment)")
	} else {
		cmd.Flags().StringVar(&o.Comment, "comment", "", "a comment kept with the decision")
		cmd.Flags().BoolVar(&o.Standing, "standing", false,
			"admit every identical call (same action id) of the attempt, not only the one that waits (scope: Standing)")
		cmd.Flags().StringVar(&o.ArgumentsSHA256, "arguments-sha256", "",
			"the SHA-256 of the full redacted arguments you approve (required when they were too long to be shown)")
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "record the decision although the action is not pending")
	return cmd
}

func (p *plugin) stopCommand(s v1alpha1.StopRequest) *cobra.Command {
	use, short := "cancel RUN", "Cancel a run: it ends at once (spec.stop: Cancel)"
	if s == v1alpha1.StopFinalize {
		use, short = "finalize RUN", "Ask a run to wrap up from its output reserve (spec.stop: Finalize)"
	}
	return &cobra.Command{
		Use:               use,
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: p.completeRuns,
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, c, err := p.target()
			if err != nil {
				return err
			}
			return Stop(cmd.Context(), p.Streams.Out, c, StopOptions{Namespace: ns, Run: args[0], Stop: s})
		},
	}
}
