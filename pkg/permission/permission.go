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

package permission

import (
	"fmt"
	"slices"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Verdict is the outcome of Evaluate for one tool call.
type Verdict string

const (
	// Allow: the call runs without asking anyone.
	Allow Verdict = "Allow"
	// Confirm: the call runs only after a user approves it.
	Confirm Verdict = "Confirm"
	// Deny: the call does not run in this mode; no approval can change that.
	Deny Verdict = "Deny"
)

// Result is a Verdict with the reason for it.
type Result struct {
	// Verdict is Allow, Confirm or Deny.
	Verdict Verdict
	// Reason is a readable sentence naming the mode, the tool, its risk and
	// effect, and the rule that decided, e.g.
	// `mode Edit requires confirmation for tool "notes.write" (risk Low, effect Write): Edit confirms every write`.
	Reason string
}

// Evaluate decides whether a call of tool may run under mode. autoApprove is
// the policy's autoApprove list; it is consulted only in Auto mode, and never
// lets a High-risk tool run unconfirmed. ReadOnly allows only the effect-None
// tools that are not previews; Plan allows every effect-None tool, previews
// (tool.preview) included; both deny every tool that writes. Unknown modes,
// risks and effects are denied (fail closed). See the package documentation
// for the whole matrix.
func Evaluate(mode v1alpha1.PermissionMode, tool v1alpha1.Tool, autoApprove []string) Result {
	if mode.Rank() < 0 {
		return Result{Verdict: Deny, Reason: fmt.Sprintf(
			"mode %q is unknown, so tool %q (risk %s, effect %s) is denied: an unknown mode fails closed",
			mode, tool.Name, tool.Risk, tool.Effect)}
	}
	subject := fmt.Sprintf("tool %q (risk %s, effect %s)", tool.Name, tool.Risk, tool.Effect)
	if tool.Preview {
		subject = fmt.Sprintf("tool %q (risk %s, effect %s, preview)", tool.Name, tool.Risk, tool.Effect)
	}
	switch {
	case !knownRisk(tool.Risk):
		return deny(mode, subject, fmt.Sprintf("risk %q is unknown and an unknown risk fails closed", tool.Risk))
	case !knownEffect(tool.Effect):
		return deny(mode, subject, fmt.Sprintf("effect %q is unknown and an unknown effect fails closed", tool.Effect))
	}

	if tool.Effect != v1alpha1.EffectNone {
		switch mode {
		case v1alpha1.ModeReadOnly:
			return deny(mode, subject, "ReadOnly allows only tools whose effect is None")
		case v1alpha1.ModePlan:
			return deny(mode, subject, "Plan allows search, read and preview (effect None), nothing that writes")
		}
	}

	if tool.Effect == v1alpha1.EffectNone && tool.Preview && mode == v1alpha1.ModeReadOnly {
		return deny(mode, subject, "ReadOnly only reads; a preview of a write needs Plan or above")
	}

	if tool.Risk == v1alpha1.RiskHigh {
		if mode == v1alpha1.ModeAuto && slices.Contains(autoApprove, tool.Name) {
			return confirm(mode, subject, "High risk is confirmed in every mode, even when autoApprove lists the tool")
		}
		return confirm(mode, subject, "High risk is confirmed in every mode")
	}

	if tool.Effect == v1alpha1.EffectNone {
		if tool.Preview {
			return allow(mode, subject, "a preview shows a write without doing it, which every mode but ReadOnly allows")
		}
		return allow(mode, subject, "effect None only reads, which every mode allows")
	}

	switch mode {
	case v1alpha1.ModeEdit:
		return confirm(mode, subject, "Edit confirms every write")
	case v1alpha1.ModeAuto:
		if slices.Contains(autoApprove, tool.Name) {
			return allow(mode, subject, "Auto runs the tools the policy's autoApprove list names")
		}
		return confirm(mode, subject, "Auto confirms every write the policy's autoApprove list does not name")
	case v1alpha1.ModeFull:
		return allow(mode, subject, "Full needs no confirmation below High risk")
	}
	// Unreachable while Rank knows exactly the five modes handled above; fail
	// closed should a sixth mode be added without a rule here.
	return deny(mode, subject, "the mode has no rule for writes, so it fails closed")
}

// Visible reports whether tool may be called at all under mode: true when
// Evaluate would allow it or ask for confirmation, false when it would deny
// it. The gateway's tools/list shows only the visible tools. The autoApprove
// list cannot make a tool visible or hide it (it only turns Confirm into
// Allow), so it is not an argument.
func Visible(mode v1alpha1.PermissionMode, tool v1alpha1.Tool) bool {
	return Evaluate(mode, tool, nil).Verdict != Deny
}

// ModeAllowed reports whether mode is within ceiling (a policy's maxMode):
// both are known modes and mode is not more permissive than ceiling.
func ModeAllowed(mode, ceiling v1alpha1.PermissionMode) bool {
	return mode.Rank() >= 0 && ceiling.Rank() >= 0 && mode.Rank() <= ceiling.Rank()
}

func allow(mode v1alpha1.PermissionMode, subject, why string) Result {
	return Result{Verdict: Allow, Reason: fmt.Sprintf("mode %s allows %s: %s", mode, subject, why)}
}

func confirm(mode v1alpha1.PermissionMode, subject, why string) Result {
	return Result{Verdict: Confirm, Reason: fmt.Sprintf("mode %s requires confirmation for %s: %s", mode, subject, why)}
}

func deny(mode v1alpha1.PermissionMode, subject, why string) Result {
	return Result{Verdict: Deny, Reason: fmt.Sprintf("mode %s denies %s: %s", mode, subject, why)}
}

func knownRisk(r v1alpha1.Risk) bool {
	switch r {
	case v1alpha1.RiskLow, v1alpha1.RiskMedium, v1alpha1.RiskHigh:
		return true
	}
	return false
}

func knownEffect(e v1alpha1.Effect) bool {
	switch e {
	case v1alpha1.EffectNone, v1alpha1.EffectWrite, v1alpha1.EffectExternal:
		return true
	}
	return false
}
