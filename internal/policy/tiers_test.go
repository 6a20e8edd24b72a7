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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// tiered is minimal() with a quick and a deep tier, quick the default.
func tiered() *v1alpha1.RuntimePolicySpec {
	s := minimal()
	s.Limits = v1alpha1.RunLimits{MaxSteps: ptr.To[int32](500), MaxDeadline: &metav1.Duration{Duration: 8 * time.Hour}}
	s.Tiers = []v1alpha1.Tier{
		{Name: "quick",
			Caps:     v1alpha1.TierLimits{MaxSteps: ptr.To[int32](30), Deadline: &metav1.Duration{Duration: 10 * time.Minute}},
			Defaults: v1alpha1.TierLimits{MaxSteps: ptr.To[int32](10), ModelRequests: ptr.To[int64](20)}},
		{Name: "deep",
			Caps:     v1alpha1.TierLimits{MaxSteps: ptr.To[int32](300), MaxAttempts: ptr.To[int32](5)},
			Defaults: v1alpha1.TierLimits{Deadline: &metav1.Duration{Duration: 2 * time.Hour}}},
	}
	s.DefaultTier = "quick"
	return s
}

func TestValidateTiers(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*v1alpha1.RuntimePolicySpec)
		want   []string
		detail string
	}{
		{"valid", func(*v1alpha1.RuntimePolicySpec) {}, []string{}, ""},
		{"no tiers, no default tier", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers, s.DefaultTier = nil, "" }, []string{}, ""},
		{"tiers without a default tier", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "" },
			[]string{"spec.defaultTier " + RuleDefaultTierKnown}, `needs a defaultTier, the tier of a run that names none (spec.tiers has "quick", "deep")`},
		{"a default tier that is not a tier", func(s *v1alpha1.RuntimePolicySpec) { s.DefaultTier = "standard" },
			[]string{"spec.defaultTier " + RuleDefaultTierKnown}, `names no tier of spec.tiers (it has "quick", "deep")`},
		{"a default tier without tiers", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers = nil },
			[]string{"spec.defaultTier " + RuleDefaultTierKnown}, "(it has none)"},
		{"a duplicate tier", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers = append(s.Tiers, s.Tiers[0]) },
			[]string{"spec.tiers[2].name " + RuleUniqueName}, `tier "quick": tier names must be unique, and spec.tiers[0] already uses it`},
		{"a default above the cap", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[0].Defaults.MaxSteps = ptr.To[int32](31) },
			[]string{"spec.tiers[0].defaults.maxSteps " + RuleTierDefaultsWithinCaps}, `tier "quick": exceeds the tier's own caps.maxSteps (30)`},
		{"a duration default above the cap", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[0].Defaults.Deadline = &metav1.Duration{Duration: time.Hour}
		}, []string{"spec.tiers[0].defaults.deadline " + RuleTierDefaultsWithinCaps}, "exceeds the tier's own caps.deadline (10m)"},
		{"a cap above the limit", func(s *v1alpha1.RuntimePolicySpec) { s.Tiers[1].Caps.MaxSteps = ptr.To[int32](600) },
			[]string{"spec.tiers[1].caps.maxSteps " + RuleTierWithinLimits}, `tier "deep": exceeds spec.limits.maxSteps (500); limits bound every run`},
		{"a default above the limit, the tier capping nothing", func(s *v1alpha1.RuntimePolicySpec) {
			s.Tiers[1].Defaults.Deadline = &metav1.Duration{Duration: 9 * time.Hour}
		}, []string{"spec.tiers[1].defaults.deadline " + RuleTierWithinLimits}, "exceeds spec.limits.maxDeadline (8h)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tiered()
			tc.mutate(s)
			errs := Validate(s)
			if diff := cmp.Diff(tc.want, where(errs)); diff != "" {
				t.Fatalf("errors (-want +got):\n%s\n%v", diff, errs)
			}
			if tc.detail != "" && !strings.Contains(errs[0].Detail, tc.detail) {
				t.Errorf("detail %q does not contain %q", errs[0].Detail, tc.detail)
			}
		})
	}
}

func TestResolveTier(t *testing.T) {
	s := tiered()
	for _, tc := range []struct {
		asked, name string
		ok, found   bool
	}{
		{"", "quick", true, true},
		{"deep", "deep", true, true},
		{"huge", "huge", false, false},
	} {
		name, tier, ok := ResolveTier(s, tc.asked)
		if name != tc.name || ok != tc.ok || (tier != nil) != tc.found || (tier != nil && tier.Name != tc.name) {
			t.Errorf("ResolveTier(%q) = %q, %v, %v; want %q, found %v, %v", tc.asked, name, tier, ok, tc.name, tc.found, tc.ok)
		}
	}
	none := minimal()
	if name, tier, ok := ResolveTier(none, ""); name != "" || tier != nil || !ok {
		t.Errorf("no tiers, none asked: %q, %v, %v; want \"\", nil, true", name, tier, ok)
	}
	if _, _, ok := ResolveTier(none, "deep"); ok {
		t.Error("no tiers, a tier asked: ok; want not ok")
	}
}

func TestTierFieldDefault(t *testing.T) {
	s := tiered()
	quick, deep := &s.Tiers[0], &s.Tiers[1]
	field := func(name string) TierField {
		for _, f := range TierFields {
			if f.Name == name {
				return f
			}
		}
		t.Fatalf("no tier field %q", name)
		return TierField{}
	}
	for _, tc := range []struct {
		tier  *v1alpha1.Tier
		field string
		want  any
		ok    bool
	}{
		{quick, "maxSteps", int64(10), true},            // the tier's default
		{deep, "maxSteps", int64(20), true},             // built in, under the cap of 300
		{quick, "deadline", "10m", true},                // built in 30m, lowered to the cap
		{deep, "deadline", "2h", true},                  // the tier's default
		{nil, "deadline", "30m", true},                  // no tiers: built in
		{nil, "maxAttempts", int64(3), true},            // no tiers: built in
		{quick, "modelRequests", int64(20), true},       // the tier's default
		{deep, "modelRequests", nil, false},             // no built-in: the run must set it
		{deep, "tokens", nil, false},                    // unset: not budgeted
		{deep, "maxAttempts", int64(3), true},           // built in, under the cap of 5
		{&v1alpha1.Tier{}, "toolCalls", nil, false},     // no built-in
		{&v1alpha1.Tier{}, "maxSteps", int64(20), true}, // a tier without caps or defaults
	} {
		f := field(tc.field)
		v, ok := f.Default(tc.tier)
		var got any
		if ok {
			got = f.JSON(v)
		}
		if ok != tc.ok || !cmp.Equal(got, tc.want) {
			t.Errorf("%s of %v: %v, %v; want %v, %v", tc.field, tc.tier, got, ok, tc.want, tc.ok)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Minute: "30m", 2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 45 * time.Second: "45s",
		time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
