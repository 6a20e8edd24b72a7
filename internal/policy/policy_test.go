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

package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	pre    = v1alpha1.InterceptorPre
	around = v1alpha1.InterceptorAround
	post   = v1alpha1.InterceptorPost

	security      = v1alpha1.ClassSecurity
	observability = v1alpha1.ClassObservability
	resource      = v1alpha1.ClassResource

	deny  = v1alpha1.PostureDeny
	allow = v1alpha1.PostureAllow
)

//go:fix inline

// minimal is the source document's minimal chain: auth Pre 10 Deny,
// rate_limit Pre 20 Deny, redact Post 50 Deny, audit Post 90 Allow buffered.
func minimal() *v1alpha1.RuntimePolicySpec {
	return &v1alpha1.RuntimePolicySpec{
		Interceptors: []v1alpha1.Interceptor{
			{Name: "auth", Class: security, Role: v1alpha1.RoleAuthentication, Phase: pre, Priority: 10,
				OnError: deny, Veto: new(true)},
			{Name: "rate_limit", Class: resource, Role: v1alpha1.RoleIdentityConsumer, Phase: pre, Priority: 20,
				OnError: deny, Veto: new(true)},
			{Name: "redact", Class: security, Role: v1alpha1.RoleRedaction, Phase: post, Priority: 50,
				OnError: deny},
			{Name: "audit", Class: observability, Role: v1alpha1.RoleAudit, Phase: post, Priority: 90,
				OnError: allow, Buffered: true},
		},
		Tools: []v1alpha1.Tool{
			{Name: "web.search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Idempotent: true},
			{Name: "notes.write", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite, Idempotent: true},
			{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
		},
		AutoApprove: []string{"web.search", "notes.write"},
		MaxMode:     v1alpha1.ModeEdit,
		DefaultMode: v1alpha1.ModePlan,
	}
}

// where renders an error as "field origin" for comparing lists.
func where(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Field+" "+e.Origin)
	}
	return out
}

func names(chain []v1alpha1.ResolvedInterceptor) []string {
	out := make([]string, len(chain))
	for i, r := range chain {
		out[i] = r.Name
	}
	return out
}

func TestResolveMinimal(t *testing.T) {
	want := []v1alpha1.ResolvedInterceptor{
		{Name: "auth", Class: security, Phase: pre, Priority: 10, OnError: deny, Veto: true, Role: v1alpha1.RoleAuthentication, RegistrationIndex: 0},
		{Name: "rate_limit", Class: resource, Phase: pre, Priority: 20, OnError: deny, Veto: true, Role: v1alpha1.RoleIdentityConsumer, RegistrationIndex: 1},
		{Name: "redact", Class: security, Phase: post, Priority: 50, OnError: deny, Role: v1alpha1.RoleRedaction, RegistrationIndex: 2},
		{Name: "audit", Class: observability, Phase: post, Priority: 90, OnError: allow, Role: v1alpha1.RoleAudit, Buffered: true, RegistrationIndex: 3},
	}
	spec := minimal()
	if diff := cmp.Diff(want, Resolve(spec.Interceptors)); diff != "" {
		t.Errorf("Resolve(minimal) mismatch (-want +got):\n%s", diff)
	}
	if errs := Validate(spec); len(errs) != 0 {
		t.Errorf("Validate(minimal) = %v, want no errors", errs)
	}

	// Registration order does not matter when phases and priorities differ.
	reversed := slices.Clone(spec.Interceptors)
	slices.Reverse(reversed)
	if got := names(Resolve(reversed)); !slices.Equal(got, []string{"auth", "rate_limit", "redact", "audit"}) {
		t.Errorf("Resolve(reversed minimal) = %v, want auth, rate_limit, redact, audit", got)
	}
	spec.Interceptors = reversed
	if errs := Validate(spec); len(errs) != 0 {
		t.Errorf("Validate(reversed minimal) = %v, want no errors", errs)
	}
}

func TestResolveOrder(t *testing.T) {
	ic := func(name string, phase v1alpha1.InterceptorPhase, priority int32) v1alpha1.Interceptor {
		return v1alpha1.Interceptor{Name: name, Class: observability, Phase: phase, Priority: priority,
			OnError: allow, Veto: new(false)}
	}
	tests := map[string]struct {
		in   []v1alpha1.Interceptor
		want []string
	}{
		"empty":                 {in: nil, want: []string{}},
		"phase before priority": {in: []v1alpha1.Interceptor{ic("p", post, 0), ic("a", around, 0), ic("r", pre, 1000)}, want: []string{"r", "a", "p"}},
		"priority within phase": {in: []v1alpha1.Interceptor{ic("c", pre, 30), ic("a", pre, 10), ic("b", pre, 20)}, want: []string{"a", "b", "c"}},
		"registration breaks ties": {
			in:   []v1alpha1.Interceptor{ic("z", pre, 5), ic("y", pre, 5), ic("x", pre, 1), ic("w", pre, 5)},
			want: []string{"x", "z", "y", "w"},
		},
		"unknown phase sorts last": {in: []v1alpha1.Interceptor{ic("u", "During", 0), ic("p", post, 1000)}, want: []string{"p", "u"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := slices.Clone(tc.in)
			got := Resolve(tc.in)
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("Resolve order mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Errorf("Resolve changed its input (-before +after):\n%s", diff)
			}
			for _, r := range got {
				if tc.in[r.RegistrationIndex].Name != r.Name {
					t.Errorf("%q has registrationIndex %d, which is %q", r.Name, r.RegistrationIndex, tc.in[r.RegistrationIndex].Name)
				}
			}
		})
	}
}

// TestResolveRegistrationBreaksTies: two policies that differ only in the
// registration order of equal-priority interceptors resolve differently, and
// each always the same way; both are valid because nothing depends on the tie.
func TestResolveRegistrationBreaksTies(t *testing.T) {
	metrics := v1alpha1.Interceptor{Name: "metrics", Class: observability, Role: v1alpha1.RoleCustom,
		Phase: post, Priority: 90, OnError: allow}
	trace := v1alpha1.Interceptor{Name: "trace", Class: observability, Role: v1alpha1.RoleCustom,
		Phase: post, Priority: 90, OnError: allow}

	one, two := minimal(), minimal()
	one.Interceptors = append(one.Interceptors, metrics, trace)
	two.Interceptors = append(two.Interceptors, trace, metrics)

	wantOne := []string{"auth", "rate_limit", "redact", "audit", "metrics", "trace"}
	wantTwo := []string{"auth", "rate_limit", "redact", "audit", "trace", "metrics"}
	for range 20 {
		if diff := cmp.Diff(wantOne, names(Resolve(one.Interceptors))); diff != "" {
			t.Fatalf("policy one (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantTwo, names(Resolve(two.Interceptors))); diff != "" {
			t.Fatalf("policy two (-want +got):\n%s", diff)
		}
	}
	if errs := Validate(one); len(errs) != 0 {
		t.Errorf("Validate(one) = %v, want no errors", errs)
	}
	if errs := Validate(two); len(errs) != 0 {
		t.Errorf("Validate(two) = %v, want no errors", errs)
	}
}

func TestValidateRules(t *testing.T) {
	tests := map[string]struct {
		mutate func(s *v1alpha1.RuntimePolicySpec)
		// want lists "field origin" of every expected error, in order.
		want []string
		// detail, if set, must appear in the first error's message.
		detail string
	}{
		"minimal is valid": {
			mutate: func(*v1alpha1.RuntimePolicySpec) {},
		},
		"minimal with explicit requires is valid": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[1].Requires = []string{"auth"}
				s.Interceptors[2].Before = []string{"audit"}
				s.Interceptors[3].After = []string{"auth", "redact"}
			},
		},
		"security interceptor fails open": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[2].OnError = allow },
			want:   []string{"spec.interceptors[2].onError securityFailClosed"},
			detail: `interceptor "redact": Security-class interceptors must fail closed (onError: Deny); a fail-open security check is no check`,
		},
		"pre interceptor without veto": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[1].Veto = nil },
			want:   []string{"spec.interceptors[1].veto preVetoExplicit"},
			detail: `interceptor "rate_limit": Pre interceptors must declare veto explicitly (true or false)`,
		},
		"pre interceptor with veto false is explicit": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[1].Veto = new(false) },
		},
		"authentication in Post": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[0].Phase = post },
			want: []string{
				"spec.interceptors[0].phase authenticationPreVeto",
				"spec.interceptors[1].role roleOrder",
			},
			detail: `interceptor "auth": Authentication interceptors must run in phase Pre with an explicit terminating veto (veto: true); ` +
				`authentication after the call protects nothing`,
		},
		"authentication without terminating veto": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[0].Veto = new(false) },
			want:   []string{"spec.interceptors[0].veto authenticationPreVeto"},
			detail: `interceptor "auth": Authentication interceptors must run in phase Pre with an explicit terminating veto ` +
				`(veto: true); a failed authentication must end the call, not mark it and go on`,
		},
		"authentication without veto": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[0].Veto = nil },
			want: []string{
				"spec.interceptors[0].veto preVetoExplicit",
				"spec.interceptors[0].veto authenticationPreVeto",
			},
			detail: `interceptor "auth": Pre interceptors must declare veto explicitly`,
		},
		"authentication not security class": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[0].Class = resource
				s.Interceptors[0].OnError = allow
			},
			want:   []string{"spec.interceptors[0].class roleSecurityClass"},
			detail: `interceptor "auth": Authentication interceptors must be Security class so that they fail closed`,
		},
		"redaction not security class": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[2].Class = observability },
			want:   []string{"spec.interceptors[2].class roleSecurityClass"},
			detail: `interceptor "redact": Redaction interceptors must be Security class`,
		},
		"duplicate interceptor name": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors = append(s.Interceptors, v1alpha1.Interceptor{Name: "audit", Class: observability,
					Phase: post, Priority: 95, OnError: allow})
			},
			want:   []string{"spec.interceptors[4].name uniqueName"},
			detail: `interceptor "audit": interceptor names must be unique, and spec.interceptors[3] already uses it`,
		},
		"missing interceptor name": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[3].Name = "" },
			want:   []string{"spec.interceptors[3].name nameRequired"},
			detail: "interceptor at spec.interceptors[3]: every interceptor needs a name",
		},
		"requires names an unknown interceptor": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[1].Requires = []string{"authn"} },
			want:   []string{"spec.interceptors[1].requires[0] knownReference"},
			detail: `interceptor "rate_limit": requires names "authn", which is not an interceptor of this chain`,
		},
		"before names an unknown interceptor": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[2].Before = []string{"audit", "log"} },
			want:   []string{"spec.interceptors[2].before[1] knownReference"},
			detail: `interceptor "redact": before names "log", which is not an interceptor of this chain`,
		},
		"self reference": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[3].After = []string{"audit"} },
			want:   []string{"spec.interceptors[3].after[0] selfReference"},
			detail: `interceptor "audit": after names the interceptor itself`,
		},
		"cycle": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[0].After = []string{"audit"}
				s.Interceptors[2].Requires = []string{"auth"}
				s.Interceptors[3].Requires = []string{"redact"}
			},
			want: []string{
				"spec.interceptors[0] constraintCycle",
				"spec.interceptors[0].after[0] constraintOrder",
			},
			detail: `interceptor "auth": requires/before/after form a cycle, "auth" -> "redact" -> "audit" -> "auth"`,
		},
		"requires violated by the resolved order": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[1].Priority = 5
				s.Interceptors[1].Requires = []string{"auth"}
			},
			want: []string{"spec.interceptors[1].requires[0] constraintOrder"},
			detail: `interceptor "rate_limit" requires "auth" to run first, but the resolved order puts it at position 1 ` +
				`and "auth" at position 2 (order is phase, priority, registration`,
		},
		"before violated by the resolved order": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[2].Before = []string{"audit"}
				s.Interceptors[3].Priority = 40
			},
			want: []string{"spec.interceptors[2].before[0] constraintOrder"},
			detail: `interceptor "redact" declares it runs before "audit", but the resolved order puts it at position 4 ` +
				`and "audit" at position 3`,
		},
		"after violated by the resolved order": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[3].After = []string{"redact"}
				s.Interceptors[3].Priority = 40
			},
			want: []string{"spec.interceptors[3].after[0] constraintOrder"},
			detail: `interceptor "audit" declares it runs after "redact", but the resolved order puts it at position 3 ` +
				`and "redact" at position 4`,
		},
		"requires held only by registration order": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[1].Priority = 10
				s.Interceptors[1].Requires = []string{"auth"}
			},
			want: []string{"spec.interceptors[1].requires[0] registrationOrder"},
			detail: `interceptor "rate_limit" requires "auth" to run first, and the resolved order puts it at position 2 and "auth" ` +
				`at position 1 only by registration order (both Pre, priority 10); registration only breaks ties`,
		},
		"identity consumer before authentication": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[1].Priority = 5 },
			want:   []string{"spec.interceptors[1].role roleOrder"},
			detail: `interceptor "rate_limit" (role IdentityConsumer) must run after Authentication interceptor "auth", ` +
				`but the resolved order puts it at position 1 and "auth" at position 2 (order is phase, priority, registration; ` +
				`constraints are assertions and never reorder the chain); an identity consumer that runs before Authentication ` +
				`counts every caller in one anonymous bucket`,
		},
		"identity consumer after authentication only by registration": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[1].Priority = 10 },
			want:   []string{"spec.interceptors[1].role registrationOrder"},
			detail: `interceptor "rate_limit" (role IdentityConsumer) must run after Authentication interceptor "auth"`,
		},
		"audit before redaction": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Interceptors[2].Priority = 95 },
			want:   []string{"spec.interceptors[3].role roleOrder"},
			detail: `interceptor "audit" (role Audit) must run after Redaction interceptor "redact", but the resolved order ` +
				`puts it at position 3 and "redact" at position 4`,
		},
		"logging before authentication and redaction": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors = append(s.Interceptors, v1alpha1.Interceptor{Name: "log", Class: observability,
					Role: v1alpha1.RoleLogging, Phase: pre, Priority: 5, OnError: allow, Veto: new(false)})
			},
			want: []string{
				"spec.interceptors[4].role roleOrder",
				"spec.interceptors[4].role roleOrder",
			},
			detail: `interceptor "log" (role Logging) must run after Redaction interceptor "redact"`,
		},
		"audit after authentication checked against every authentication": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors = append(s.Interceptors, v1alpha1.Interceptor{Name: "auth2", Class: security,
					Role: v1alpha1.RoleAuthentication, Phase: pre, Priority: 30, OnError: deny, Veto: new(true)})
			},
			want:   []string{"spec.interceptors[1].role roleOrder"},
			detail: `interceptor "rate_limit" (role IdentityConsumer) must run after Authentication interceptor "auth2"`,
		},
		"duplicate tool": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Tools = append(s.Tools, v1alpha1.Tool{Name: "web.search", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectNone})
			},
			want:   []string{"spec.tools[3].name uniqueName"},
			detail: `tool "web.search": tool names must be unique, and spec.tools[0] already uses it`,
		},
		"autoApprove names an unknown tool": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.AutoApprove = append(s.AutoApprove, "shell.exec") },
			want:   []string{"spec.autoApprove[2] autoApproveKnown"},
			detail: `autoApprove names tool "shell.exec", which is not in the tool catalogue (spec.tools)`,
		},
		"autoApprove names a High-risk tool": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.AutoApprove = append(s.AutoApprove, "report.publish") },
			want:   []string{"spec.autoApprove[2] autoApproveNotHighRisk"},
			detail: `autoApprove names tool "report.publish", which is High risk (spec.tools[2]); ` +
				`High risk is confirmed in every mode, so it cannot be auto-approved`,
		},
		"autoApprove names a tool twice": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.AutoApprove = append(s.AutoApprove, "web.search") },
			want:   []string{"spec.autoApprove[2] uniqueName"},
			detail: `autoApprove names tool "web.search" more than once`,
		},
		"defaultMode above maxMode": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.DefaultMode = v1alpha1.ModeFull },
			want:   []string{"spec.defaultMode modeCeiling"},
			detail: "defaultMode Full is above maxMode Edit: a session's default mode must be within the policy's ceiling",
		},
		"unset defaultMode above maxMode": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.DefaultMode = ""
				s.MaxMode = v1alpha1.ModeReadOnly
			},
			want:   []string{"spec.defaultMode modeCeiling"},
			detail: "defaultMode Plan (the default when unset) is above maxMode ReadOnly",
		},
		"unset modes take their defaults": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.DefaultMode, s.MaxMode = "", "" },
		},
		"a write served by a tool server is valid": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.ToolServers = []v1alpha1.ToolServer{{Name: "tickets", URL: "https://tickets.example.com/mcp"}}
				s.Tools = append(s.Tools,
					v1alpha1.Tool{Name: "ticket.create", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal, Server: "tickets"},
					v1alpha1.Tool{Name: "ticket.search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tickets"},
					v1alpha1.Tool{Name: "ticket.diff", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tickets", Preview: true})
			},
		},
		"an effect-None tool without a server runs in the agent": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Tools = append(s.Tools, v1alpha1.Tool{Name: "notes.diff", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Preview: true})
			},
		},
		"a write without a server": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Tools = append(s.Tools, v1alpha1.Tool{Name: "files.write", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectWrite})
			},
			want: []string{"spec.tools[3].server toolServed"},
			detail: `spec.tools[3].server: Required value: tool "files.write" (effect Write): a Write or External tool must name the ` +
				`spec.toolServers entry that serves it, so that its calls go through the gateway; only the built-in tools ` +
				`("report.publish", "notes.write", "run.spawn", "run.children") and effect-None tools need no server`,
		},
		"an external call without a server": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Tools = append(s.Tools, v1alpha1.Tool{Name: "mail.send", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal})
			},
			want:   []string{"spec.tools[3].server toolServed"},
			detail: `tool "mail.send" (effect External)`,
		},
		"a server that is not declared": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.ToolServers = []v1alpha1.ToolServer{{Name: "tickets", URL: "https://tickets.example.com/mcp"}}
				s.Tools = append(s.Tools, v1alpha1.Tool{Name: "mail.send", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal, Server: "mail"})
			},
			want:   []string{"spec.tools[3].server knownServer"},
			detail: `spec.tools[3].server: Not found: "mail": tool "mail.send": server "mail" is not an entry of spec.toolServers (spec.toolServers has "tickets")`,
		},
		"a server when there are none": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Tools[0].Server = "search" },
			want:   []string{"spec.tools[0].server knownServer"},
			detail: `server "search" is not an entry of spec.toolServers (spec.toolServers is empty)`,
		},
		"a built-in tool with a server": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.ToolServers = []v1alpha1.ToolServer{{Name: "tickets", URL: "https://tickets.example.com/mcp"}}
				s.Tools[2].Server = "tickets"
			},
			want: []string{"spec.tools[2].server builtinNoServer"},
			detail: `spec.tools[2].server: Forbidden: tool "report.publish" is built into the gateway, which serves it itself; ` +
				`a built-in tool names no server (server "tickets")`,
		},
		"a preview that writes": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) { s.Tools[1].Preview = true },
			want:   []string{"spec.tools[1].preview previewEffectNone"},
			detail: `spec.tools[1].preview: Invalid value: true: tool "notes.write" (effect Write): only an effect-None tool can be a preview; ` +
				`Plan mode calls previews and must never call a tool that writes`,
		},
		"unknown values": {
			mutate: func(s *v1alpha1.RuntimePolicySpec) {
				s.Interceptors[3].Class = "Telemetry"
				s.Interceptors[3].Role = "Tracing"
				s.Tools[0].Effect = "Read"
				s.MaxMode = "Root"
			},
			want: []string{
				"spec.interceptors[3].class supportedValue",
				"spec.interceptors[3].role supportedValue",
				"spec.tools[0].effect supportedValue",
				"spec.maxMode supportedValue",
			},
			detail: `interceptor "audit": supported values:`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := minimal()
			tc.mutate(spec)
			errs := Validate(spec)
			if diff := cmp.Diff(tc.want, where(errs), cmp.Comparer(func(a, b []string) bool {
				return len(a) == 0 && len(b) == 0 || slices.Equal(a, b)
			})); diff != "" {
				t.Fatalf("Validate errors (-want +got):\n%s\nall: %v", diff, errs)
			}
			if tc.detail != "" && !strings.Contains(errs[0].Error(), tc.detail) {
				t.Errorf("first error\n  %s\ndoes not contain\n  %s", errs[0], tc.detail)
			}
			for _, e := range errs {
				if e.Origin == "" || e.Detail == "" {
					t.Errorf("error without rule or detail: %s", e)
				}
			}
		})
	}
}

func TestValidateNilSpec(t *testing.T) {
	if errs := Validate(nil); len(errs) != 1 || errs[0].Field != "spec" {
		t.Errorf("Validate(nil) = %v, want one error at spec", errs)
	}
}

// TestValidateIncident replays the source document's incident: a migration
// dropped explicit priorities (all equal, one phase) and registered the
// interceptors in alphabetical order. Nothing errors at run time; admission
// must reject it, naming every interceptor whose dependency broke.
func TestValidateIncident(t *testing.T) {
	byName := map[string]v1alpha1.Interceptor{
		"audit": {Name: "audit", Class: observability, Role: v1alpha1.RoleAudit, Phase: pre, Priority: 100,
			OnError: allow, Veto: new(false), Buffered: true},
		"auth": {Name: "auth", Class: security, Role: v1alpha1.RoleAuthentication, Phase: pre, Priority: 100,
			OnError: deny, Veto: new(true)},
		"log": {Name: "log", Class: observability, Role: v1alpha1.RoleLogging, Phase: pre, Priority: 100,
			OnError: allow, Veto: new(false)},
		"rate_limit": {Name: "rate_limit", Class: resource, Role: v1alpha1.RoleIdentityConsumer, Phase: pre, Priority: 100,
			OnError: deny, Veto: new(true)},
		"redact": {Name: "redact", Class: security, Role: v1alpha1.RoleRedaction, Phase: pre, Priority: 100,
			OnError: deny, Veto: new(false)},
	}
	chain := func(order ...string) *v1alpha1.RuntimePolicySpec {
		spec := minimal()
		spec.Interceptors = nil
		for _, n := range order {
			spec.Interceptors = append(spec.Interceptors, byName[n])
		}
		return spec
	}

	tests := map[string]struct {
		spec      *v1alpha1.RuntimePolicySpec
		wantOrder []string
		want      []string
	}{
		"alphabetical registration": {
			spec:      chain("audit", "auth", "log", "rate_limit", "redact"),
			wantOrder: []string{"audit", "auth", "log", "rate_limit", "redact"},
			want: []string{
				"spec.interceptors[0].role roleOrder",         // audit before redact
				"spec.interceptors[0].role roleOrder",         // audit before auth
				"spec.interceptors[2].role roleOrder",         // log before redact
				"spec.interceptors[2].role registrationOrder", // log after auth only by registration
				"spec.interceptors[3].role registrationOrder", // rate_limit after auth only by registration
			},
		},
		"the order the incident's span showed": {
			spec:      chain("audit", "log", "redact", "rate_limit", "auth"),
			wantOrder: []string{"audit", "log", "redact", "rate_limit", "auth"},
			want: []string{
				"spec.interceptors[0].role roleOrder", // audit after redact
				"spec.interceptors[0].role roleOrder", // audit after auth
				"spec.interceptors[1].role roleOrder", // log after redact
				"spec.interceptors[1].role roleOrder", // log after auth
				"spec.interceptors[3].role roleOrder", // rate_limit after auth
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantOrder, names(Resolve(tc.spec.Interceptors))); diff != "" {
				t.Errorf("resolved order (-want +got):\n%s", diff)
			}
			errs := Validate(tc.spec)
			if diff := cmp.Diff(tc.want, where(errs)); diff != "" {
				t.Fatalf("Validate errors (-want +got):\n%s\nall: %v", diff, errs)
			}
			all := errs.ToAggregate().Error()
			for _, n := range []string{`"auth"`, `"rate_limit"`, `"redact"`, `"audit"`, `"log"`} {
				if !strings.Contains(all, n) {
					t.Errorf("no message names %s:\n%s", n, all)
				}
			}
			for _, e := range errs {
				t.Log(e)
			}
		})
	}
}
