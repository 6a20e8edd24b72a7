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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// AttemptSpecInput is what the spec of an attempt is decided from.
type AttemptSpecInput struct {
	Run      *v1alpha1.ResearchRun
	Decision Decision
	// Attempt is the attempt's number; PodName its pod's name.
	Attempt int32
	PodName string
	// Current is the attempt's spec as it is, nil for a new attempt.
	Current *v1alpha1.RunAttemptSpec
	// Session and Policy as gathered (either may be nil); PolicyReady says
	// the policy is resolved and valid.
	Session     *v1alpha1.Session
	Policy      *v1alpha1.RuntimePolicy
	PolicyReady bool
	// Chain is the policy's interceptor chain resolved from its validated
	// spec (policy.Resolve), which a new snapshot carries: never the
	// policy's status.resolvedChain, which is a report, not the authority.
	Chain []v1alpha1.ResolvedInterceptor
	// Previous is the attempt before this one, if any.
	Previous *v1alpha1.RunAttempt
}

// AttemptSpec is the spec an attempt should carry for the decision: the
// run's identity and goal, the decided phase, grant and directives, the
// approvals, the session's current mode (else the session's asked mode, else
// the policy's default), the deadline, the heartbeat interval, and — taken
// once, when the attempt starts — the policy snapshot. A replacement attempt
// started while the policy is being re-resolved or is invalid inherits its
// predecessor's snapshot: an agent never gets an empty or unresolved chain.
func AttemptSpec(in AttemptSpecInput) v1alpha1.RunAttemptSpec {
	spec := v1alpha1.RunAttemptSpec{}
	if in.Current != nil {
		spec = *in.Current.DeepCopy()
	}
	run, d := in.Run, in.Decision
	spec.RunName = run.Name
	spec.Attempt = in.Attempt
	spec.Goal = run.Spec.Goal
	spec.PodName = in.PodName
	spec.RunPhase = d.Status.Phase
	spec.Grant = d.Grant
	if d.Grant.FinalizeOnly && d.Status.Finalization != nil {
		// The gateway applies the reserve from its own count when it learns
		// of Finalizing (see Grant.reserve).
		r := d.Status.Finalization.Reserve
		spec.Grant.Reserve = &r
	}
	spec.Directives = d.Directives
	spec.Approvals = run.Spec.Approvals
	if in.Session != nil {
		spec.Mode = in.Session.Status.Mode
		if spec.Mode == "" {
			spec.Mode = in.Session.Spec.Mode
		}
	}
	if in.Current == nil && in.Policy != nil {
		p := in.Policy
		spec.Policy = v1alpha1.PolicySnapshot{
			Name:               p.Name,
			ResolvedChain:      in.Chain,
			Tools:              p.Spec.Tools,
			AutoApprove:        p.Spec.AutoApprove,
			Models:             p.Spec.Models,
			Currency:           p.Spec.Currency,
			ToolServers:        p.Spec.ToolServers,
			ApprovalTimeout:    p.Spec.ApprovalTimeout,
			OnSecurityDegraded: p.Spec.OnSecurityDegraded.DeepCopy(),
			Compression:        p.Spec.Compression.DeepCopy(),
			AuthorityWait:      p.Spec.AuthorityWait,
			Events:             eventRetention(p.Spec.Events),
			Harness:            p.Spec.Harness.DeepCopy(),
			Children:           p.Spec.Children.DeepCopy(),
		}
		if in.Previous != nil && !in.PolicyReady {
			spec.Policy = *in.Previous.Spec.Policy.DeepCopy()
		}
		if spec.Mode == "" {
			spec.Mode = p.Spec.DefaultMode
		}
	}
	if d.Status.StartTime != nil {
		deadline := d.Status.StartTime.Add(durationOr(run.Spec.Budget.Deadline, DefaultDeadline))
		spec.Deadline = &metav1.Time{Time: deadline}
		spec.HardDeadline = &metav1.Time{Time: deadline.Add(durationOr(run.Spec.Budget.FinalizationGrace, DefaultFinalizationGrace))}
	}
	spec.HeartbeatInterval = run.Spec.Recovery.HeartbeatInterval
	return spec
}

// eventRetention is the policy's spec.events with its defaults filled in
// (the API server applies them; a policy built in Go may lack them), so
// that the attempt's snapshot states the retention its events get.
func eventRetention(e v1alpha1.EventRetention) v1alpha1.EventRetention {
	out := *e.DeepCopy()
	if out.MaxAge == nil {
		out.MaxAge = &metav1.Duration{Duration: v1alpha1.DefaultEventMaxAge}
	}
	if out.MaxBytes == nil {
		out.MaxBytes = resource.NewQuantity(v1alpha1.DefaultEventMaxBytes, resource.BinarySI)
	}
	return out
}
