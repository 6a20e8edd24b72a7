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

package permission_test

import (
	"fmt"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/permission"
)

//nolint:lll // the expected output is Evaluate's reasons, verbatim.
func ExampleEvaluate() {
	autoApprove := []string{"notes.write"}
	tools := []v1alpha1.Tool{
		{Name: "web.search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
		{Name: "notes.diff", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Preview: true},
		{Name: "notes.write", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite},
		{Name: "mail.send", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal},
		{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
	}
	for _, mode := range []v1alpha1.PermissionMode{v1alpha1.ModeReadOnly, v1alpha1.ModePlan, v1alpha1.ModeAuto} {
		for _, tool := range tools {
			r := permission.Evaluate(mode, tool, autoApprove)
			fmt.Printf("%-7s %s\n", r.Verdict, r.Reason)
		}
	}
	// Output:
	// Allow   mode ReadOnly allows tool "web.search" (risk Low, effect None): effect None only reads, which every mode allows
	// Deny    mode ReadOnly denies tool "notes.diff" (risk Low, effect None, preview): ReadOnly only reads; a preview of a write needs Plan or above
	// Deny    mode ReadOnly denies tool "notes.write" (risk Low, effect Write): ReadOnly allows only tools whose effect is None
	// Deny    mode ReadOnly denies tool "mail.send" (risk Medium, effect External): ReadOnly allows only tools whose effect is None
	// Deny    mode ReadOnly denies tool "report.publish" (risk High, effect External): ReadOnly allows only tools whose effect is None
	// Allow   mode Plan allows tool "web.search" (risk Low, effect None): effect None only reads, which every mode allows
	// Allow   mode Plan allows tool "notes.diff" (risk Low, effect None, preview): a preview shows a write without doing it, which every mode but ReadOnly allows
	// Deny    mode Plan denies tool "notes.write" (risk Low, effect Write): Plan allows search, read and preview (effect None), nothing that writes
	// Deny    mode Plan denies tool "mail.send" (risk Medium, effect External): Plan allows search, read and preview (effect None), nothing that writes
	// Deny    mode Plan denies tool "report.publish" (risk High, effect External): Plan allows search, read and preview (effect None), nothing that writes
	// Allow   mode Auto allows tool "web.search" (risk Low, effect None): effect None only reads, which every mode allows
	// Allow   mode Auto allows tool "notes.diff" (risk Low, effect None, preview): a preview shows a write without doing it, which every mode but ReadOnly allows
	// Allow   mode Auto allows tool "notes.write" (risk Low, effect Write): Auto runs the tools the policy's autoApprove list names
	// Confirm mode Auto requires confirmation for tool "mail.send" (risk Medium, effect External): Auto confirms every write the policy's autoApprove list does not name
	// Confirm mode Auto requires confirmation for tool "report.publish" (risk High, effect External): High risk is confirmed in every mode
}

func ExampleVisible() {
	diff := v1alpha1.Tool{Name: "notes.diff", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Preview: true}
	for _, mode := range []v1alpha1.PermissionMode{v1alpha1.ModeReadOnly, v1alpha1.ModePlan} {
		fmt.Println(mode, permission.Visible(mode, diff))
	}
	// Output:
	// ReadOnly false
	// Plan true
}

func ExampleModeAllowed() {
	fmt.Println(permission.ModeAllowed(v1alpha1.ModeAuto, v1alpha1.ModeEdit))
	fmt.Println(permission.ModeAllowed(v1alpha1.ModePlan, v1alpha1.ModeEdit))
	// Output:
	// false
	// true
}
