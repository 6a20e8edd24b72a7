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

// Package permission owns the permission-mode × tool-risk matrix: the single
// decision of whether a tool call may run (Allow), must wait for a user's
// approval (Confirm) or must not run (Deny) under a Session's permission mode.
//
// It is pure (no I/O, no clock, no Kubernetes client) so that the agent SDK,
// which enforces the decision in the pod, and the operator, which checks
// policies and explains decisions, apply exactly the same rules.
//
// # The matrix
//
// Evaluate decides from the mode, the tool's effect and risk, whether the
// tool is a preview (tools[].preview: an effect-None tool that shows what a
// write would do, a dry run or a diff, without doing it), and whether the
// policy's autoApprove list names the tool:
//
//	mode      effect None  preview (effect None)  effect Write / External   High risk
//	--------  -----------  ---------------------  ------------------------  ------------------------------------
//	ReadOnly  Allow        Deny                   Deny                      Confirm if effect None and no
//	                                                                        preview, else Deny
//	Plan      Allow        Allow                  Deny                      Confirm if effect None, else Deny
//	Edit      Allow        Allow                  Confirm                   Confirm
//	Auto      Allow        Allow                  Allow if in autoApprove,  Confirm (even if in autoApprove)
//	                                              else Confirm
//	Full      Allow        Allow                  Allow                     Confirm
//
// The rules, in the order Evaluate applies them:
//
//  1. An unknown mode, risk or effect is denied: the matrix fails closed.
//  2. ReadOnly and Plan deny every tool that writes (effect Write or
//     External), whatever its risk.
//  3. ReadOnly also denies previews: it only reads. Plan allows search, read
//     and preview, or it could not gather and show what a plan needs. The
//     preview flag means nothing on a tool that writes (the RuntimePolicy
//     webhook rejects it there).
//  4. High risk is never Allow: in every mode that permits the tool at all
//     it needs confirmation. That is why a RuntimePolicy that lists a
//     High-risk tool in autoApprove is rejected.
//  5. Effect None (preview or not) is allowed.
//  6. Edit confirms every write; Auto allows the writes autoApprove lists and
//     confirms the rest; Full allows them.
//
// Visible tells whether a tool may be called at all (Evaluate does not deny
// it); the gateway lists only visible tools.
//
// autoApprove only matters in Auto mode. ModeAllowed tells whether a mode is
// within a policy's ceiling (maxMode).
package permission
