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

// Package lifecycle owns every decision that ends, pauses or finalizes a run;
// pure: no client, no time.Now.
//
// The ResearchRun reconciler gathers the facts of a run (its spec and
// persisted status, every RunAttempt, the current attempt's pod, its place
// in the session's queue, the time) into an Input, calls Decide, and applies
// the Decision: one status write if the status changed, the RunAttempt and
// pod the decision asks for, the pods it asks to delete, the events, the
// requeue. Nothing else ends a run.
//
// # The ladder
//
// A pass folds the input once into facts (facts.go): the ledger, the
// current attempt, the start time. Each rule of the ladder (ladder.go) reads
// the facts and returns a verdict — the phase, the reason, the cause, whether
// a new attempt starts, whether the run enters Finalizing — or no match. The
// first rung that matches decides the pass (the order is written once, in
// ladder, in decide.go), and enact (enact.go) turns its verdict into the
// Decision: status, conditions, events, requeue. enact is the only code that
// sets a phase. The rungs, in order:
//
//  1. Terminated: absorbing; the decision is returned unchanged, no action —
//     only the accounting (ledger, steps, budget used) takes in facts the
//     gateway could write after the run ended, and it only rises.
//  2. Stopping: an earlier pass decided the run ends (status.reason, with
//     condition Ready=False/Stopping) and is waiting for the pod to stop. The
//     decision stands even if the facts behind it change (a heartbeat comes
//     back, a cancel arrives later); the run becomes Terminated with that
//     reason once the pod has stopped.
//  3. Cancel: spec.stop Cancel → grant zero, delete the pod, Terminated/
//     Cancelled once it stopped; never Finalizing. A run that never started
//     ends at once (also for spec.stop Finalize: nothing to finalize).
//  4. Blocked (Pending): the session or policy is missing, or the policy is
//     not resolved and valid (Input.Blocked) → stays Pending with that
//     message; nothing starts. Below Cancel, so a stop still ends it.
//  5. Queue (Pending/Queued): beyond the queue limit → QueueFull; waited past
//     the timeout → QueueTimeout; else Queued. The session holder does not
//     match: the rungs below decide for it as started (Running, startTime,
//     attempt 1) in the same pass.
//  6. HardDeadline: startTime + deadline + finalizationGrace passed →
//     DeadlineExceeded (a finalizing run keeps its reason). It sits above the
//     fact-driven rungs so that nothing — a stuck finalization, a pod failing
//     in a loop — keeps a run (and its session) past it.
//  7. FactGrace: the current attempt's pod stopped on its own (Succeeded or
//     Failed, at PodObservation.FinishedAt) and the gateway may still hold
//     facts it coalesces (usage, steps: written within its flush interval)
//     → the run holds its course (phase, attempt, grant; nothing can be
//     spent) until the facts are final — the attempt proposed finish and
//     settled (durable before the agent heard back), or its status was
//     written after the pod stopped (AttemptFacts.FactsWritten, later in
//     whole seconds) — or FinishedAt + Input.FactGrace has passed;
//     requeued for the grace's end. The rungs above do not wait.
//  8. AttemptFailed (the current attempt's pod failed, vanished, exited 0
//     while being deleted without finishing, or did not start in time; a
//     fault was escalated; heartbeats stopped; a pod that exits 0 of its own
//     accord has not failed, see Finish):
//     a. an in-flight side effect without idempotency key → UnsafeToRecover;
//     b. Finalizing → Terminated with the reason it was finalizing for;
//     c. a gate already at its hard limit → finalize with that reason in a
//     new, finalize-only attempt if the reserve is intact, else end;
//     d. spec.stop Finalize → finalize (FinalizeRequested) in a new attempt;
//     e. an escalated fault that is not retryable (Fault.Retryable false: a
//     bad key, a bad configuration) → AgentFailed, the message naming the
//     fault: a new attempt would meet it again, so the run is not
//     recovered; it finalizes in a new finalize-only attempt if the
//     reserve is intact, else ends;
//     f. attempts left → Recovering: delete the pod, wait for the backoff
//     (counted from the Recovering condition's LastTransitionTime), start
//     the next attempt; Running again once its pod runs;
//     g. else RecoveryExhausted: finalize in a new finalize-only attempt if
//     the reserve is intact, else end.
//     A new finalize-only attempt (c, d, e, g) waits, as a replacement does,
//     for the failed attempt's pod to stop: until then the run is
//     Recovering (Recovering=True/AttemptFailed keeps the failure's story),
//     the pod is deleted and nothing else starts; the finalize-only attempt
//     starts in the first pass that sees the pod stopped, without the
//     backoff. Two pods of one run never overlap.
//  9. PolicyViolation: the current attempt's counters went below the ledger,
//     or its usage exceeds its grant → PolicyViolation.
//  10. Finish: finish proposed → Finalizing/Completed; so is the current
//     pod's exit 0 of its own accord (Succeeded, not being deleted), the
//     agent process's implicit finish proposal (an agent that only uses the
//     gateway's two doors never calls finish and settle); spec.stop Finalize
//     → Finalizing/FinalizeRequested (a finish wins); a finalizing run whose
//     publication settled ends with its reason and the settled value: at
//     once if its pod has stopped, else it stays Finalizing (same attempt,
//     kept finalize grant) until finalizingTime + finalizationGrace for the
//     agent to exit on its own, and only then ends (deletes the pod). A pod
//     that exited 0 without settling (Running or Finalizing) is settled from
//     the gateway's publication facts: Complete if blocksCommitted ==
//     blocksPlanned > 0, Partial if some blocks were committed, None if
//     none; the message says "the agent exited 0 without settling; settled
//     from what the gateway published: 1/1 sections". A pod that exits
//     non-zero has failed (rung 8). Advice never enters this decision.
//  11. Gates (Running/Recovering): working budget, deadline, maxSteps,
//     sameCallLimit, noProgressLimit, in that order; at a hard limit →
//     Finalizing with the gate's reason if the reserve is intact, else end.
//  12. Steady: keep working with the working allowance and the directives
//     (Degrade, then Compress, as gates come close); local faults are only
//     counted.
//
// Entering Finalizing records status.finalization (reason, cause, reserve):
// later passes tell the finalization from it, never from status.message.
//
// "End" always means: Terminated at once if the pod has stopped, else delete
// the pod and wait (rung 2). A run is never declared Terminated while its
// current pod may still run. Until then every pass sets Reconciling=True
// (Ready's reason and message), so kstatus reads the run as InProgress; the
// Terminated pass sets Reconciling=False and, as RunHealth classes the end
// (kstatus.go), either Ready=True (Current: Completed, Cancelled,
// FinalizeRequested, or a limit whose finalization delivered) or
// Ready=False and Stalled=True (Failed), each with the run's reason.
// Succeeded=True only for Completed with settlement Complete.
//
// # Approvals
//
// A tool call that needs a person's decision waits in the gateway, which
// lists it in the attempt's status.awaitingApproval. Every pass mirrors the
// working attempt's list on the run (status.pendingApprovals, each entry
// with its attempt number) and, once the run has started, sets the
// AwaitingApproval condition: True/ApprovalPending with the action ids and
// the kubectl command that approves one, False/NoPendingApprovals otherwise.
// Nothing is pending while the run has not started, is ending, or its
// current attempt has failed (a failed attempt's call is never dispatched).
// Each action id that becomes pending gets one ApprovalRequested event.
//
// spec.approvals is append-only. The gateway reads them from the attempt's
// spec (which the operator writes after the run's status) and honours a
// decision only for a call that waited when it was stamped; an Approve is
// spent by one dispatch unless its scope is Standing (the gateway records
// it in the attempt's status.usedApprovals). status.observedApprovals
// counts the entries already judged: each later entry whose action no call
// waits on (dispatched, refused, expired, never asked) gets one
// ApprovalChangedNothing warning, once.
//
// A waiting call counts toward no gate: steps, progress and repeated calls
// are what the attempt reports, and waiting reports none. Only the deadline,
// a wall clock, keeps running. Nor is waiting silence: while a call waits,
// its expiry (expiresAt, else requestedAt) counts as a sign of life, so an
// agent blocked in a tool call for the approval timeout does not fail its
// heartbeat; past the expiry the heartbeat timeout counts again.
//
// # Liveness
//
// An attempt the gateway governs (status.liveness) has no periodic
// heartbeat write: the gateway seeing it is its heartbeat, and the gateway
// vouches for it with its own Lease (AttemptFacts.Lease, an input like the
// pod). Its heartbeat is silentSince once the gateway wrote it, else the
// Lease's renewTime while the process that took the attempt holds it, the
// Lease's acquireTime when another process holds it (the gateway
// restarted), the attempt's last status write when the Lease is gone; never
// before liveness.since, never after now. Other attempts keep
// status.heartbeatTime. The run is requeued for that heartbeat plus the
// timeout: a renewal changes no decision, so nothing watches it.
//
// # Budget
//
// Grants are absolute counters of the attempt's own usage. Running: budget
// minus reserve minus what the other attempts used. Finalizing: the
// attempt's usage when finalization began plus what is left of the reserve,
// persisted in status.budget.granted and never raised afterwards. Zero once
// the run is ending or has ended. The ledger (status.ledger) keeps each
// attempt's last reported counters; the run's usage is their sum, so a
// replacement attempt never double-counts and a superseded attempt's usage
// still counts. Facts of superseded attempts cannot drive the phase.
package lifecycle
