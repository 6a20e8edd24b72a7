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

import "github.com/agentrun-dev/agentrun/api/v1alpha1"

// Health is how kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status), and so
// Flux's `wait: true` and health checks, must read a run. Its values are
// kstatus's own status names.
type Health string

const (
	// HealthInProgress: the run is not over (Reconciling=True).
	HealthInProgress Health = "InProgress"
	// HealthCurrent: the run ended as the operator promised (Ready=True,
	// Reconciling=False, no Stalled=True).
	HealthCurrent Health = "Current"
	// HealthFailed: the run ended short (Stalled=True, Ready=False).
	HealthFailed Health = "Failed"
)

// RunHealth is the kstatus of a run with this phase, reason and settlement
// (a run stopping, phase not yet Terminated, is InProgress):
//
//   - not Terminated: InProgress;
//   - Completed: Current, whatever the settlement (the agent finished of its
//     own accord; an agent whose work is its tools' effects publishes
//     nothing);
//   - Cancelled or FinalizeRequested: Current, whatever the settlement (the
//     user asked the run to stop);
//   - a limit the spec set (BudgetExhausted, DeadlineExceeded, StepLimit,
//     RepeatedCall, NoProgress): Current if its finalization delivered
//     something (settlement Complete or Partial), Failed if nothing (None);
//   - AgentFailed, PolicyViolation, RecoveryExhausted, UnsafeToRecover,
//     QueueFull, QueueTimeout, and any reason not listed: Failed, even when
//     a finalization delivered something.
//
// Succeeded stays the strict outcome (Completed with settlement Complete).
func RunHealth(phase v1alpha1.Phase, reason v1alpha1.Reason, settlement v1alpha1.Settlement) Health {
	if phase != v1alpha1.PhaseTerminated {
		return HealthInProgress
	}
	switch reason {
	case v1alpha1.ReasonCompleted, v1alpha1.ReasonCancelled, v1alpha1.ReasonFinalizeRequested:
		return HealthCurrent
	case v1alpha1.ReasonBudgetExhausted, v1alpha1.ReasonDeadlineExceeded,
		v1alpha1.ReasonStepLimit, v1alpha1.ReasonRepeatedCall, v1alpha1.ReasonNoProgress:
		if settlement == v1alpha1.SettlementComplete || settlement == v1alpha1.SettlementPartial {
			return HealthCurrent
		}
	}
	return HealthFailed
}
