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

// Package v1alpha1 holds the admission webhooks of agentrun.dev/v1alpha1:
// the checks that need another object or the requester's identity. Checks
// that need neither are CRD schema and CEL rules on the types (api/v1alpha1);
// who may write which state is enforced by ValidatingAdmissionPolicies
// (config/admission-policy), with no webhook server to go down.
//
//   - RuntimePolicy (runtimepolicy_webhook.go): the chain and catalogue rules
//     of internal/policy; an invalid policy is refused.
//   - Session (session_webhook.go): its policy exists; its mode stays under
//     the policy's ceiling, a switch needs a reason and a mode once set is
//     not removed; its queue overrides stay within the policy's bounds; its
//     policy does not change under active or queued runs. Every mode switch
//     is stamped with who made it (SessionDefaulter; nobody else may write
//     the stamp), and the Session controller moves the stamp into
//     status.modeHistory with what the session was doing (its active run,
//     that run's phase and steps, the queued runs).
//   - ResearchRun (researchrun_webhook.go, tier.go): its Session and policy
//     exist; its tier is one of the policy's (none when the policy has no
//     tiers); its budget, deadline, gates and attempts stay within the
//     policy's limits and its tier's caps, and its reserve below its budget;
//     its pod template decodes strictly (no unknown fields) into a valid,
//     restricted pod and stays immutable by meaning. Each new approval is
//     stamped with its approver and time (ApprovalStamper). A new run gets
//     its resolved tier and, for what it leaves unset, the tier's defaults
//     (else the built-in ones) written into its spec; an update keeps them
//     (TierDefaulter).
//
// The webhooks refuse or stamp a request; they never decide a run's phase
// (internal/lifecycle does) nor write status. They read referents from the
// operator's cache and confirm a miss with a live read (reader.go), so a
// stale cache cannot refuse a valid object.
package v1alpha1
