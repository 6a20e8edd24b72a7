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
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// byteSource hands out fuzz input one byte at a time, then zeros.
type byteSource struct {
	data []byte
	i    int
}

func (b *byteSource) next() int {
	if b.i >= len(b.data) {
		return 0
	}
	b.i++
	return int(b.data[b.i-1])
}

func (b *byteSource) pick(n int) int { return b.next() % n }

var (
	allPhases  = []v1alpha1.InterceptorPhase{pre, around, post}
	allClasses = []v1alpha1.InterceptorClass{security, observability, resource}
	allModes   = []v1alpha1.PermissionMode{v1alpha1.ModeReadOnly, v1alpha1.ModePlan, v1alpha1.ModeEdit,
		v1alpha1.ModeAuto, v1alpha1.ModeFull}
	allRisks   = []v1alpha1.Risk{v1alpha1.RiskLow, v1alpha1.RiskMedium, v1alpha1.RiskHigh}
	allEffects = []v1alpha1.Effect{v1alpha1.EffectNone, v1alpha1.EffectWrite, v1alpha1.EffectExternal}
)

// fuzzServer is the tool server of the generated policies.
const fuzzServer = "tools"

// orderKey is what the resolved order sorts by, registration aside.
func orderKey(ic v1alpha1.Interceptor) [2]int { return [2]int{phaseRank(ic.Phase), int(ic.Priority)} }

func compareKeys(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) }

// genValid builds a random policy that satisfies every rule by construction:
// fail-closed security, explicit Pre vetoes, roles assigned in resolved order
// so every assertion holds with a strict (phase, priority) gap, and ordering
// constraints only between interceptors whose (phase, priority) differ.
func genValid(b *byteSource) *v1alpha1.RuntimePolicySpec {
	n := 1 + b.pick(10)
	ics := make([]v1alpha1.Interceptor, n)
	for i := range ics {
		ic := &ics[i]
		ic.Name = fmt.Sprintf("ic-%d", i)
		ic.Phase = allPhases[b.pick(3)]
		ic.Priority = int32(b.pick(8) * 10)
		ic.Class = allClasses[b.pick(3)]
		ic.OnError = v1alpha1.PostureDeny
		if ic.Class != security && b.pick(2) == 0 {
			ic.OnError = v1alpha1.PostureAllow
		}
		if ic.Phase == pre || b.pick(4) == 0 {
			ic.Veto = new(b.pick(2) == 0)
		}
		if b.pick(2) == 0 {
			ic.Role = v1alpha1.RoleCustom
		}
	}

	// Roles, in resolved order.
	var authKey, redactKey *[2]int
	consumersSeen, recordersSeen := false, false
	for _, r := range Resolve(ics) {
		ic := &ics[r.RegistrationIndex]
		k := orderKey(*ic)
		after := func(bound *[2]int) bool { return bound == nil || compareKeys(k, *bound) > 0 }
		switch b.pick(6) {
		case 0:
			if ic.Phase == pre && !consumersSeen && !recordersSeen {
				ic.Role, ic.Class, ic.OnError, ic.Veto = v1alpha1.RoleAuthentication, security, deny, new(true)
				authKey = &k
			}
		case 1:
			if !recordersSeen {
				ic.Role, ic.Class, ic.OnError = v1alpha1.RoleRedaction, security, deny
				redactKey = &k
			}
		case 2:
			if after(authKey) {
				ic.Role = v1alpha1.RoleIdentityConsumer
				consumersSeen = true
			}
		case 3:
			if after(authKey) && after(redactKey) {
				ic.Role = []v1alpha1.InterceptorRole{v1alpha1.RoleAudit, v1alpha1.RoleLogging}[b.pick(2)]
				recordersSeen = true
			}
		}
	}

	// Ordering constraints that the resolved order satisfies with a gap.
	for i := range ics {
		for range b.pick(3) {
			t := b.pick(n)
			name := ics[t].Name
			if t == i || slices.Contains(ics[i].Requires, name) || slices.Contains(ics[i].After, name) ||
				slices.Contains(ics[i].Before, name) {
				continue
			}
			switch c := compareKeys(orderKey(ics[t]), orderKey(ics[i])); {
			case c < 0 && b.pick(2) == 0:
				ics[i].Requires = append(ics[i].Requires, name)
			case c < 0:
				ics[i].After = append(ics[i].After, name)
			case c > 0:
				ics[i].Before = append(ics[i].Before, name)
			}
		}
	}

	spec := &v1alpha1.RuntimePolicySpec{Interceptors: ics}
	for i := range b.pick(6) {
		tool := v1alpha1.Tool{Name: fmt.Sprintf("tool.%d", i), Risk: allRisks[b.pick(3)], Effect: allEffects[b.pick(3)]}
		switch {
		case tool.Effect != v1alpha1.EffectNone:
			tool.Server = fuzzServer
		case b.pick(2) == 0:
			tool.Preview = true
		}
		spec.Tools = append(spec.Tools, tool)
		if tool.Risk != v1alpha1.RiskHigh && b.pick(2) == 0 {
			spec.AutoApprove = append(spec.AutoApprove, tool.Name)
		}
	}
	spec.ToolServers = []v1alpha1.ToolServer{{Name: fuzzServer, URL: "https://tools.example.com/mcp"}}
	maxRank := b.pick(5)
	spec.MaxMode = allModes[maxRank]
	spec.DefaultMode = allModes[b.pick(maxRank+1)]
	return spec
}

// injection is one violation put into a valid policy, and the error
// Validate must report for it.
type injection struct {
	kind      string
	wantField string
	wantRule  Rule
	wantText  string
	// match, if set, replaces the field and text checks.
	match func(e *field.Error) bool
}

func want(kind, wantField string, wantRule Rule, wantText string) injection {
	return injection{kind: kind, wantField: wantField, wantRule: wantRule, wantText: wantText}
}

func inject(b *byteSource, spec *v1alpha1.RuntimePolicySpec) injection {
	ics := spec.Interceptors
	n := len(ics)
	p := b.pick(n)
	ensureTwo := func() {
		if len(spec.Interceptors) < 2 {
			spec.Interceptors = append(spec.Interceptors, v1alpha1.Interceptor{Name: "extra", Class: observability,
				Phase: post, Priority: 1000, OnError: allow})
			ics, n = spec.Interceptors, len(spec.Interceptors)
		}
	}
	ic := func(i int) string { return fmt.Sprintf("spec.interceptors[%d]", i) }

	switch b.pick(9) {
	case 0:
		ics[p].Class, ics[p].OnError = security, allow
		return want("fail-open security", ic(p)+".onError", RuleSecurityFailClosed,
			fmt.Sprintf("interceptor %q: Security-class interceptors must fail closed", ics[p].Name))
	case 1:
		ics[p].Phase, ics[p].Veto = pre, nil
		return want("missing Pre veto", ic(p)+".veto", RulePreVetoExplicit,
			fmt.Sprintf("interceptor %q: Pre interceptors must declare veto explicitly", ics[p].Name))
	case 2:
		ensureTwo()
		order := Resolve(ics)
		x := b.pick(n - 1)
		y := x + 1 + b.pick(n-1-x)
		early, late := int(order[x].RegistrationIndex), int(order[y].RegistrationIndex)
		ics[early].Requires = append(ics[early].Requires, ics[late].Name)
		return want("violated requires", fmt.Sprintf("%s.requires[%d]", ic(early), len(ics[early].Requires)-1),
			RuleConstraintOrder, fmt.Sprintf("interceptor %q requires %q to run first, but the resolved order puts it at position %d",
				ics[early].Name, ics[late].Name, x+1))
	case 3:
		ensureTwo()
		q := (p + 1 + b.pick(n-1)) % n
		lo, hi := min(p, q), max(p, q)
		ics[hi].Name = ics[lo].Name
		return want("duplicate name", ic(hi)+".name", RuleUniqueName,
			fmt.Sprintf("interceptor %q: interceptor names must be unique, and %s already uses it", ics[lo].Name, ic(lo)))
	case 4:
		if len(spec.Tools) == 0 {
			spec.Tools = append(spec.Tools, v1alpha1.Tool{Name: "tool.x", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone})
		}
		t := &spec.Tools[p%len(spec.Tools)]
		t.Risk = v1alpha1.RiskHigh
		j := slices.Index(spec.AutoApprove, t.Name)
		if j < 0 {
			spec.AutoApprove = append(spec.AutoApprove, t.Name)
			j = len(spec.AutoApprove) - 1
		}
		return want("High-risk autoApprove", fmt.Sprintf("spec.autoApprove[%d]", j), RuleAutoApproveNotHighRisk,
			fmt.Sprintf("autoApprove names tool %q, which is High risk", t.Name))
	case 5:
		ics[p].After = append(ics[p].After, "ghost")
		return want("unknown reference", fmt.Sprintf("%s.after[%d]", ic(p), len(ics[p].After)-1), RuleKnownReference,
			fmt.Sprintf("interceptor %q: after names \"ghost\", which is not an interceptor of this chain", ics[p].Name))
	case 7:
		if len(spec.Tools) == 0 {
			spec.Tools = append(spec.Tools, v1alpha1.Tool{Name: "tool.x", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone})
		}
		k := p % len(spec.Tools)
		t := &spec.Tools[k]
		path := fmt.Sprintf("spec.tools[%d]", k)
		switch b.pick(4) {
		case 0:
			t.Effect, t.Server, t.Preview = allEffects[1+b.pick(2)], "", false
			return want("write without a server", path+".server", RuleToolServed,
				fmt.Sprintf("tool %q (effect %s): a Write or External tool must name the spec.toolServers entry", t.Name, t.Effect))
		case 1:
			t.Server = "ghost"
			return want("unknown server", path+".server", RuleKnownServer,
				fmt.Sprintf("tool %q: server \"ghost\" is not an entry of spec.toolServers", t.Name))
		case 2:
			t.Effect, t.Preview = allEffects[1+b.pick(2)], true
			t.Server = fuzzServer
			return want("preview that writes", path+".preview", RulePreviewEffectNone,
				fmt.Sprintf("tool %q (effect %s): only an effect-None tool can be a preview", t.Name, t.Effect))
		default:
			t.Name, t.Server = v1alpha1.BuiltinToolNotesWrite, fuzzServer
			for i := range spec.Tools {
				if i != k && spec.Tools[i].Name == t.Name {
					spec.Tools[i].Name = fmt.Sprintf("tool.r%d", i)
				}
			}
			spec.AutoApprove = slices.DeleteFunc(spec.AutoApprove, func(n string) bool { return n == t.Name })
			return want("built-in with a server", path+".server", RuleBuiltinNoServer,
				fmt.Sprintf("tool %q is built into the gateway", t.Name))
		}
	case 6:
		if spec.MaxMode == v1alpha1.ModeFull {
			spec.MaxMode = v1alpha1.ModeAuto
		}
		spec.DefaultMode = allModes[spec.MaxMode.Rank()+1]
		return want("defaultMode above maxMode", "spec.defaultMode", RuleModeCeiling,
			fmt.Sprintf("defaultMode %s is above maxMode %s", spec.DefaultMode, spec.MaxMode))
	default:
		ensureTwo()
		q := (p + 1 + b.pick(n-1)) % n
		ics[p].Before = append(ics[p].Before, ics[q].Name)
		ics[q].Before = append(ics[q].Before, ics[p].Name)
		// The base graph is acyclic, so every new cycle uses p -> q or q -> p:
		// the one component with a cycle holds p and q, it is reported at its
		// lowest index (p, q or lower), and the cycle shown passes p or q.
		pName, qName := fmt.Sprintf("%q", ics[p].Name), fmt.Sprintf("%q", ics[q].Name)
		return injection{kind: "cycle", wantRule: RuleConstraintCycle, match: func(e *field.Error) bool {
			var k int
			if _, err := fmt.Sscanf(e.Field, "spec.interceptors[%d]", &k); err != nil || k > min(p, q) {
				return false
			}
			return strings.Contains(e.Detail, pName) || strings.Contains(e.Detail, qName)
		}}
	}
}

func checkResolve(t *testing.T, ics []v1alpha1.Interceptor) {
	t.Helper()
	got := Resolve(ics)
	if len(got) != len(ics) {
		t.Fatalf("Resolve returned %d entries for %d interceptors", len(got), len(ics))
	}
	seen := make([]bool, len(ics))
	for k, r := range got {
		i := int(r.RegistrationIndex)
		if i < 0 || i >= len(ics) || seen[i] || ics[i].Name != r.Name {
			t.Fatalf("Resolve entry %d (%+v) is not a distinct interceptor of the input", k, r)
		}
		seen[i] = true
		if k > 0 {
			prev := got[k-1]
			c := cmp.Or(cmp.Compare(phaseRank(prev.Phase), phaseRank(r.Phase)), cmp.Compare(prev.Priority, r.Priority),
				cmp.Compare(prev.RegistrationIndex, r.RegistrationIndex))
			if c >= 0 {
				t.Fatalf("Resolve is not ordered at %d: %+v then %+v", k, prev, r)
			}
		}
	}
}

func checkErrors(t *testing.T, errs field.ErrorList) {
	t.Helper()
	for _, e := range errs {
		if e.Origin == "" || e.Detail == "" || !strings.HasPrefix(e.Field, "spec") {
			t.Fatalf("error without rule, detail or spec path: %#v", e)
		}
	}
}

// FuzzValidate builds a random valid policy, checks that Validate accepts
// it, injects one violation at a random position and checks that Validate
// reports it at the right field with the right rule.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{4, 0, 1, 2, 0, 1, 1, 0, 0, 0, 3, 2, 2, 1, 5, 1, 0, 9, 9, 2})
	for kind := range 9 {
		f.Add([]byte{9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
			29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 3, byte(kind), 7, 7, 7})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &byteSource{data: data}
		spec := genValid(b)
		checkResolve(t, spec.Interceptors)
		if errs := Validate(spec); len(errs) != 0 {
			t.Fatalf("generated policy is valid by construction, Validate says:\n%v\npolicy: %+v", errs.ToAggregate(), spec)
		}

		inj := inject(b, spec)
		checkResolve(t, spec.Interceptors)
		errs := Validate(spec)
		checkErrors(t, errs)
		for _, e := range errs {
			if e.Origin != inj.wantRule {
				continue
			}
			if inj.match != nil && inj.match(e) ||
				inj.match == nil && e.Field == inj.wantField && strings.Contains(e.Detail, inj.wantText) {
				return
			}
		}
		t.Fatalf("injected %s: want an error at %q with rule %s containing %q, got:\n%v\npolicy: %+v",
			inj.kind, inj.wantField, inj.wantRule, inj.wantText, errs.ToAggregate(), spec)
	})
}

// FuzzValidateArbitrary feeds Validate and Resolve arbitrary, mostly invalid
// chains (unknown enum values, empty and repeated names, dangling and
// self references): they must not panic, Resolve must be a sorted
// permutation, and Validate must be deterministic with every error carrying
// a rule and a detail.
func FuzzValidateArbitrary(f *testing.F) {
	f.Add([]byte{}, "auth,rate_limit,,x")
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 255, 0, 17}, "a,a,b")
	f.Fuzz(func(t *testing.T, data []byte, words string) {
		b := &byteSource{data: data}
		pool := strings.Split(words, ",")
		word := func() string { return pool[b.pick(len(pool))] }
		anyOf := func(valid ...string) string {
			if k := b.pick(len(valid) + 1); k < len(valid) {
				return valid[k]
			}
			return word()
		}
		var spec v1alpha1.RuntimePolicySpec
		for range b.pick(12) {
			ic := v1alpha1.Interceptor{
				Name:     word(),
				Class:    v1alpha1.InterceptorClass(anyOf("Security", "Observability", "Resource")),
				Role:     v1alpha1.InterceptorRole(anyOf("", "Authentication", "IdentityConsumer", "Redaction", "Audit", "Logging", "Custom")),
				Phase:    v1alpha1.InterceptorPhase(anyOf("Pre", "Around", "Post")),
				Priority: int32(b.next()) - 64,
				OnError:  v1alpha1.Posture(anyOf("Deny", "Allow")),
			}
			if k := b.pick(3); k < 2 {
				ic.Veto = new(k == 0)
			}
			for range b.pick(4) {
				switch b.pick(3) {
				case 0:
					ic.Requires = append(ic.Requires, word())
				case 1:
					ic.Before = append(ic.Before, word())
				default:
					ic.After = append(ic.After, word())
				}
			}
			spec.Interceptors = append(spec.Interceptors, ic)
		}
		for range b.pick(6) {
			spec.Tools = append(spec.Tools, v1alpha1.Tool{Name: word(),
				Risk: v1alpha1.Risk(anyOf("Low", "Medium", "High")), Effect: v1alpha1.Effect(anyOf("None", "Write", "External"))})
		}
		for range b.pick(4) {
			spec.AutoApprove = append(spec.AutoApprove, word())
		}
		spec.MaxMode = v1alpha1.PermissionMode(anyOf("", "ReadOnly", "Plan", "Edit", "Auto", "Full"))
		spec.DefaultMode = v1alpha1.PermissionMode(anyOf("", "ReadOnly", "Plan", "Edit", "Auto", "Full"))

		checkResolve(t, spec.Interceptors)
		errs := Validate(&spec)
		checkErrors(t, errs)
		if again := Validate(&spec); !slices.EqualFunc(errs, again, func(x, y *field.Error) bool { return x.Error() == y.Error() }) {
			t.Fatalf("Validate is not deterministic:\n%v\n%v", errs, again)
		}
	})
}
