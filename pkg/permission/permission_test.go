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
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	readOnly = v1alpha1.ModeReadOnly
	plan     = v1alpha1.ModePlan
	edit     = v1alpha1.ModeEdit
	auto     = v1alpha1.ModeAuto
	full     = v1alpha1.ModeFull

	low    = v1alpha1.RiskLow
	medium = v1alpha1.RiskMedium
	high   = v1alpha1.RiskHigh

	none     = v1alpha1.EffectNone
	write    = v1alpha1.EffectWrite
	external = v1alpha1.EffectExternal

	listed   = true
	unlisted = false
)

// TestEvaluateMatrix checks every cell of the matrix (5 modes × 3 risks ×
// 3 effects × listed in autoApprove or not) against a table written out by
// hand from the design brief, not recomputed from the rules.
func TestEvaluateMatrix(t *testing.T) {
	type cell struct {
		mode   v1alpha1.PermissionMode
		risk   v1alpha1.Risk
		effect v1alpha1.Effect
		listed bool
		want   Verdict
	}
	cells := []cell{
		// ReadOnly
		{readOnly, low, none, unlisted, Allow},
		{readOnly, low, none, listed, Allow},
		{readOnly, low, write, unlisted, Deny},
		{readOnly, low, write, listed, Deny},
		{readOnly, low, external, unlisted, Deny},
		{readOnly, low, external, listed, Deny},
		{readOnly, medium, none, unlisted, Allow},
		{readOnly, medium, none, listed, Allow},
		{readOnly, medium, write, unlisted, Deny},
		{readOnly, medium, write, listed, Deny},
		{readOnly, medium, external, unlisted, Deny},
		{readOnly, medium, external, listed, Deny},
		{readOnly, high, none, unlisted, Confirm},
		{readOnly, high, none, listed, Confirm},
		{readOnly, high, write, unlisted, Deny},
		{readOnly, high, write, listed, Deny},
		{readOnly, high, external, unlisted, Deny},
		{readOnly, high, external, listed, Deny},
		// Plan
		{plan, low, none, unlisted, Allow},
		{plan, low, none, listed, Allow},
		{plan, low, write, unlisted, Deny},
		{plan, low, write, listed, Deny},
		{plan, low, external, unlisted, Deny},
		{plan, low, external, listed, Deny},
		{plan, medium, none, unlisted, Allow},
		{plan, medium, none, listed, Allow},
		{plan, medium, write, unlisted, Deny},
		{plan, medium, write, listed, Deny},
		{plan, medium, external, unlisted, Deny},
		{plan, medium, external, listed, Deny},
		{plan, high, none, unlisted, Confirm},
		{plan, high, none, listed, Confirm},
		{plan, high, write, unlisted, Deny},
		{plan, high, write, listed, Deny},
		{plan, high, external, unlisted, Deny},
		{plan, high, external, listed, Deny},
		// Edit
		{edit, low, none, unlisted, Allow},
		{edit, low, none, listed, Allow},
		{edit, low, write, unlisted, Confirm},
		{edit, low, write, listed, Confirm},
		{edit, low, external, unlisted, Confirm},
		{edit, low, external, listed, Confirm},
		{edit, medium, none, unlisted, Allow},
		{edit, medium, none, listed, Allow},
		{edit, medium, write, unlisted, Confirm},
		{edit, medium, write, listed, Confirm},
		{edit, medium, external, unlisted, Confirm},
		{edit, medium, external, listed, Confirm},
		{edit, high, none, unlisted, Confirm},
		{edit, high, none, listed, Confirm},
		{edit, high, write, unlisted, Confirm},
		{edit, high, write, listed, Confirm},
		{edit, high, external, unlisted, Confirm},
		{edit, high, external, listed, Confirm},
		// Auto
		{auto, low, none, unlisted, Allow},
		{auto, low, none, listed, Allow},
		{auto, low, write, unlisted, Confirm},
		{auto, low, write, listed, Allow},
		{auto, low, external, unlisted, Confirm},
		{auto, low, external, listed, Allow},
		{auto, medium, none, unlisted, Allow},
		{auto, medium, none, listed, Allow},
		{auto, medium, write, unlisted, Confirm},
		{auto, medium, write, listed, Allow},
		{auto, medium, external, unlisted, Confirm},
		{auto, medium, external, listed, Allow},
		{auto, high, none, unlisted, Confirm},
		{auto, high, none, listed, Confirm},
		{auto, high, write, unlisted, Confirm},
		{auto, high, write, listed, Confirm},
		{auto, high, external, unlisted, Confirm},
		{auto, high, external, listed, Confirm},
		// Full
		{full, low, none, unlisted, Allow},
		{full, low, none, listed, Allow},
		{full, low, write, unlisted, Allow},
		{full, low, write, listed, Allow},
		{full, low, external, unlisted, Allow},
		{full, low, external, listed, Allow},
		{full, medium, none, unlisted, Allow},
		{full, medium, none, listed, Allow},
		{full, medium, write, unlisted, Allow},
		{full, medium, write, listed, Allow},
		{full, medium, external, unlisted, Allow},
		{full, medium, external, listed, Allow},
		{full, high, none, unlisted, Confirm},
		{full, high, none, listed, Confirm},
		{full, high, write, unlisted, Confirm},
		{full, high, write, listed, Confirm},
		{full, high, external, unlisted, Confirm},
		{full, high, external, listed, Confirm},
	}
	if len(cells) != 90 {
		t.Fatalf("the matrix has %d cells, want 90", len(cells))
	}
	seen := map[cell]bool{}
	for _, c := range cells {
		key := c
		key.want = ""
		if seen[key] {
			t.Fatalf("cell %+v is listed twice", key)
		}
		seen[key] = true

		name := fmt.Sprintf("%s/%s/%s/listed=%t", c.mode, c.risk, c.effect, c.listed)
		t.Run(name, func(t *testing.T) {
			tool := v1alpha1.Tool{Name: "probe.tool", Risk: c.risk, Effect: c.effect}
			var autoApprove []string
			if c.listed {
				autoApprove = []string{"other.tool", "probe.tool"}
			} else {
				autoApprove = []string{"other.tool"}
			}
			got := Evaluate(c.mode, tool, autoApprove)
			if got.Verdict != c.want {
				t.Errorf("Evaluate(%s, %s/%s, listed=%t) = %s, want %s; reason: %s",
					c.mode, c.risk, c.effect, c.listed, got.Verdict, c.want, got.Reason)
			}
			for _, part := range []string{
				"mode " + string(c.mode), `tool "probe.tool"`, "risk " + string(c.risk), "effect " + string(c.effect),
			} {
				if !strings.Contains(got.Reason, part) {
					t.Errorf("reason %q does not name %q", got.Reason, part)
				}
			}
		})
	}
}

// TestEvaluatePreview checks every cell of the preview column (an
// effect-None tool with preview set: 5 modes × 3 risks × listed or not),
// written out by hand: ReadOnly denies a preview, Plan and above treat it as
// any effect-None tool. The flag changes nothing on a tool that writes.
func TestEvaluatePreview(t *testing.T) {
	type cell struct {
		mode   v1alpha1.PermissionMode
		risk   v1alpha1.Risk
		listed bool
		want   Verdict
	}
	cells := []cell{
		{readOnly, low, unlisted, Deny},
		{readOnly, low, listed, Deny},
		{readOnly, medium, unlisted, Deny},
		{readOnly, medium, listed, Deny},
		{readOnly, high, unlisted, Deny},
		{readOnly, high, listed, Deny},
		{plan, low, unlisted, Allow},
		{plan, low, listed, Allow},
		{plan, medium, unlisted, Allow},
		{plan, medium, listed, Allow},
		{plan, high, unlisted, Confirm},
		{plan, high, listed, Confirm},
		{edit, low, unlisted, Allow},
		{edit, low, listed, Allow},
		{edit, medium, unlisted, Allow},
		{edit, medium, listed, Allow},
		{edit, high, unlisted, Confirm},
		{edit, high, listed, Confirm},
		{auto, low, unlisted, Allow},
		{auto, low, listed, Allow},
		{auto, medium, unlisted, Allow},
		{auto, medium, listed, Allow},
		{auto, high, unlisted, Confirm},
		{auto, high, listed, Confirm},
		{full, low, unlisted, Allow},
		{full, low, listed, Allow},
		{full, medium, unlisted, Allow},
		{full, medium, listed, Allow},
		{full, high, unlisted, Confirm},
		{full, high, listed, Confirm},
	}
	for _, c := range cells {
		t.Run(fmt.Sprintf("%s/%s/listed=%t", c.mode, c.risk, c.listed), func(t *testing.T) {
			tool := v1alpha1.Tool{Name: "probe.diff", Risk: c.risk, Effect: none, Preview: true}
			autoApprove := []string{"other.tool"}
			if c.listed {
				autoApprove = append(autoApprove, tool.Name)
			}
			got := Evaluate(c.mode, tool, autoApprove)
			if got.Verdict != c.want {
				t.Errorf("Evaluate(%s, %s preview, listed=%t) = %s, want %s; reason: %s", c.mode, c.risk, c.listed, got.Verdict, c.want, got.Reason)
			}
			if !strings.Contains(got.Reason, "preview") {
				t.Errorf("reason %q does not say the tool is a preview", got.Reason)
			}
			if v := Visible(c.mode, tool); v != (c.want != Deny) {
				t.Errorf("Visible(%s, %s preview) = %t, want %t", c.mode, c.risk, v, c.want != Deny)
			}
		})
	}
	for _, mode := range []v1alpha1.PermissionMode{readOnly, plan, edit, auto, full} {
		for _, effect := range []v1alpha1.Effect{write, external} {
			tool := v1alpha1.Tool{Name: "probe.tool", Risk: medium, Effect: effect}
			flagged := tool
			flagged.Preview = true
			if a, b := Evaluate(mode, tool, nil).Verdict, Evaluate(mode, flagged, nil).Verdict; a != b {
				t.Errorf("%s, effect %s: preview turned %s into %s", mode, effect, a, b)
			}
		}
	}
}

// TestVisible: a tool is visible exactly when Evaluate does not deny it,
// whatever autoApprove says.
func TestVisible(t *testing.T) {
	for _, mode := range []v1alpha1.PermissionMode{readOnly, plan, edit, auto, full, "Root"} {
		for _, risk := range []v1alpha1.Risk{low, medium, high} {
			for _, effect := range []v1alpha1.Effect{none, write, external} {
				for _, preview := range []bool{false, true} {
					tool := v1alpha1.Tool{Name: "probe.tool", Risk: risk, Effect: effect, Preview: preview}
					want := Evaluate(mode, tool, []string{tool.Name}).Verdict != Deny
					if got := Visible(mode, tool); got != want {
						t.Errorf("Visible(%s, %s/%s/preview=%t) = %t, want %t", mode, risk, effect, preview, got, want)
					}
				}
			}
		}
	}
	if !Visible(plan, v1alpha1.Tool{Name: "web.search", Risk: low, Effect: none}) {
		t.Error("Plan must show a read")
	}
	if Visible(readOnly, v1alpha1.Tool{Name: "notes.write", Risk: low, Effect: write}) {
		t.Error("ReadOnly must hide a write")
	}
}

func TestEvaluateFailsClosed(t *testing.T) {
	tests := map[string]struct {
		mode       v1alpha1.PermissionMode
		tool       v1alpha1.Tool
		wantReason string
	}{
		"unknown mode": {
			mode:       "Root",
			tool:       v1alpha1.Tool{Name: "web.search", Risk: low, Effect: none},
			wantReason: `mode "Root" is unknown`,
		},
		"empty mode": {
			mode:       "",
			tool:       v1alpha1.Tool{Name: "web.search", Risk: low, Effect: none},
			wantReason: `mode "" is unknown`,
		},
		"mode in the wrong case": {
			mode:       "full",
			tool:       v1alpha1.Tool{Name: "web.search", Risk: low, Effect: none},
			wantReason: `mode "full" is unknown`,
		},
		"unknown risk": {
			mode:       full,
			tool:       v1alpha1.Tool{Name: "web.search", Risk: "Trivial", Effect: none},
			wantReason: `risk "Trivial" is unknown`,
		},
		"unknown effect": {
			mode:       full,
			tool:       v1alpha1.Tool{Name: "web.search", Risk: low, Effect: "Delete"},
			wantReason: `effect "Delete" is unknown`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Evaluate(tc.mode, tc.tool, []string{tc.tool.Name})
			if got.Verdict != Deny {
				t.Errorf("Evaluate = %s, want Deny; reason: %s", got.Verdict, got.Reason)
			}
			if !strings.Contains(got.Reason, tc.wantReason) || !strings.Contains(got.Reason, "fails closed") {
				t.Errorf("reason %q should contain %q and say it fails closed", got.Reason, tc.wantReason)
			}
		})
	}
}

func TestEvaluateReasons(t *testing.T) {
	tests := map[string]struct {
		mode        v1alpha1.PermissionMode
		tool        v1alpha1.Tool
		autoApprove []string
		want        Result
	}{
		"plan denies a write": {
			mode: plan,
			tool: v1alpha1.Tool{Name: "notes.write", Risk: low, Effect: write},
			want: Result{Deny, `mode Plan denies tool "notes.write" (risk Low, effect Write): ` +
				`Plan allows search, read and preview (effect None), nothing that writes`},
		},
		"read-only denies a preview": {
			mode: readOnly,
			tool: v1alpha1.Tool{Name: "notes.diff", Risk: low, Effect: none, Preview: true},
			want: Result{Deny, `mode ReadOnly denies tool "notes.diff" (risk Low, effect None, preview): ` +
				`ReadOnly only reads; a preview of a write needs Plan or above`},
		},
		"plan allows a preview": {
			mode: plan,
			tool: v1alpha1.Tool{Name: "notes.diff", Risk: low, Effect: none, Preview: true},
			want: Result{Allow, `mode Plan allows tool "notes.diff" (risk Low, effect None, preview): ` +
				`a preview shows a write without doing it, which every mode but ReadOnly allows`},
		},
		"edit confirms a write": {
			mode: edit,
			tool: v1alpha1.Tool{Name: "notes.write", Risk: low, Effect: write},
			want: Result{Confirm, `mode Edit requires confirmation for tool "notes.write" (risk Low, effect Write): ` +
				`Edit confirms every write`},
		},
		"auto confirms a listed High-risk tool": {
			mode:        auto,
			tool:        v1alpha1.Tool{Name: "report.publish", Risk: high, Effect: external},
			autoApprove: []string{"report.publish"},
			want: Result{Confirm, `mode Auto requires confirmation for tool "report.publish" (risk High, effect External): ` +
				`High risk is confirmed in every mode, even when autoApprove lists the tool`},
		},
		"full allows a Medium-risk external call": {
			mode: full,
			tool: v1alpha1.Tool{Name: "mail.send", Risk: medium, Effect: external},
			want: Result{Allow, `mode Full allows tool "mail.send" (risk Medium, effect External): ` +
				`Full needs no confirmation below High risk`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Evaluate(tc.mode, tc.tool, tc.autoApprove); got != tc.want {
				t.Errorf("Evaluate =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

func TestModeAllowed(t *testing.T) {
	modes := []v1alpha1.PermissionMode{readOnly, plan, edit, auto, full}
	for i, mode := range modes {
		for j, ceiling := range modes {
			if got, want := ModeAllowed(mode, ceiling), i <= j; got != want {
				t.Errorf("ModeAllowed(%s, %s) = %t, want %t", mode, ceiling, got, want)
			}
		}
		if ModeAllowed(mode, "Root") {
			t.Errorf("ModeAllowed(%s, unknown ceiling) = true, want false", mode)
		}
		if ModeAllowed("Root", mode) {
			t.Errorf("ModeAllowed(unknown mode, %s) = true, want false", mode)
		}
	}
	if ModeAllowed("", "") {
		t.Error(`ModeAllowed("", "") = true, want false`)
	}
}

func FuzzEvaluate(f *testing.F) {
	for _, m := range []string{"ReadOnly", "Plan", "Edit", "Auto", "Full", "", "root"} {
		for _, r := range []string{"Low", "Medium", "High", "x"} {
			for _, e := range []string{"None", "Write", "External", "Delete"} {
				f.Add(m, "t", r, e, "t", false, false)
				f.Add(m, "t", r, e, "t", true, false)
				f.Add(m, "t", r, e, "t", false, true)
			}
		}
	}
	f.Fuzz(func(t *testing.T, mode, name, risk, effect, approved string, alsoListName, preview bool) {
		tool := v1alpha1.Tool{Name: name, Risk: v1alpha1.Risk(risk), Effect: v1alpha1.Effect(effect), Preview: preview}
		autoApprove := []string{approved}
		if alsoListName {
			autoApprove = append(autoApprove, name)
		}
		m := v1alpha1.PermissionMode(mode)
		got := Evaluate(m, tool, autoApprove)

		switch got.Verdict {
		case Allow, Confirm, Deny:
		default:
			t.Fatalf("verdict %q is not Allow, Confirm or Deny", got.Verdict)
		}
		if got.Reason == "" {
			t.Fatal("empty reason")
		}
		if tool.Risk == high && got.Verdict == Allow {
			t.Fatalf("High risk allowed: %s", got.Reason)
		}
		if (m == readOnly || m == plan) && tool.Effect != none && got.Verdict == Allow {
			t.Fatalf("%s allowed a tool that is not effect None: %s", m, got.Reason)
		}
		if m == readOnly && tool.Preview && got.Verdict != Deny {
			t.Fatalf("ReadOnly did not deny a preview: %s", got.Reason)
		}
		if Visible(m, tool) != (got.Verdict != Deny) {
			t.Fatalf("Visible disagrees with %s: %s", got.Verdict, got.Reason)
		}
		known := m.Rank() >= 0 && knownRisk(tool.Risk) && knownEffect(tool.Effect)
		if !known && got.Verdict != Deny {
			t.Fatalf("unknown mode, risk or effect not denied: %s", got.Reason)
		}
		if m != auto && got != Evaluate(m, tool, nil) {
			t.Fatalf("autoApprove changed the verdict outside Auto mode: %s", got.Reason)
		}
	})
}
