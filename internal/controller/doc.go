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

// Package controller holds the operator's reconcilers. They gather and
// apply; they decide nothing that internal/lifecycle owns.
//
//   - ResearchRunReconciler (researchrun_controller.go, session_queue.go) is
//     the termination owner, the only code that writes a run's phase. A pass
//     is Get → stop if Terminated → gather (the run's Session and
//     RuntimePolicy, its RunAttempts, the current attempt's pod, its place in
//     the session's queue) → lifecycle.Decide → apply. Nothing is written
//     before deciding: a waiting run is admitted by lifecycle.Admit from the
//     cache plus the starts this process wrote that the cache does not show
//     yet (admissions), and its own status write is the start.
//   - SessionReconciler (session_controller.go) keeps a Session's status (a
//     coalesced summary of its runs, the audited mode history) and finalizer. When the Session is deleted it asks its runs to stop
//     (spec.stop: Cancel); it never ends one itself.
//   - RuntimePolicyReconciler (runtimepolicy_controller.go) resolves the
//     interceptor chain into status.resolvedChain and sets Valid.
//
// The rules every reconciler keeps:
//
//   - One status write per pass, none when nothing changed, always with a
//     resourceVersion precondition (patchStatusIfChanged, status_patch.go).
//     A conflict is counted in agentrun_controller_conflicts_total and the
//     pass is retried at once from fresh cache contents.
//   - A run's status, which carries its decision, is written before any other
//     effect of the decision, and the decision's events right after it: a
//     refused write leaves nothing behind that a later pass could read as
//     another decision, and a later step that fails is redone by the next
//     pass.
//   - A stale cache never makes the operator act twice: child names are
//     deterministic (<run>-<n>), so AlreadyExists means done; pods this
//     process created are expected until the cache shows them
//     (expectations.go); a pod missing from the cache is confirmed with a
//     live read before it counts as gone; an attempt's pod is created once,
//     and recorded only if this process created it (createdPods: the UID
//     its create returned), never adopted by name or owner reference.
//   - Returned errors say what was being done; the clock is injected.
//
// The other files: predicates.go (which watch events start a pass, and
// why the others do not), fact_latency.go (when a fact arrived, for
// agentrun_fact_to_decision_seconds), metrics.go, runner.go (what a
// namespace needs before its first attempt pod), indexes.go (cache indexes).
package controller
