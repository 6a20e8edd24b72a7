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
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The tier rules (Validate).
const (
	// RuleDefaultTierKnown: spec.defaultTier names a tier of spec.tiers, and
	// is set whenever spec.tiers is.
	RuleDefaultTierKnown Rule = "defaultTierKnown"
	// RuleTierDefaultsWithinCaps: a tier's defaults do not exceed its caps.
	RuleTierDefaultsWithinCaps Rule = "tierDefaultsWithinCaps"
	// RuleTierWithinLimits: a tier's caps and defaults do not exceed
	// spec.limits, which bound every run whatever its tier.
	RuleTierWithinLimits Rule = "tierWithinLimits"
)

// TierField is one of the six things a tier caps and defaults, and where a
// ResearchRun sets it. Values are int64: counts as themselves, durations in
// nanoseconds.
type TierField struct {
	// Name is the field's name in TierLimits ("maxSteps").
	Name string
	// Limit is the matching spec.limits field ("maxSteps").
	Limit string
	// Path is where a run sets it: spec.gates.maxSteps.
	Path []string
	// Builtin is what a run gets when neither it nor its tier sets the
	// field; HasBuiltin is false for the fields without one
	// (modelRequests, toolCalls and tokens).
	Builtin    int64
	HasBuiltin bool
	// Duration: the value is a duration.
	Duration bool

	tier  func(v1alpha1.TierLimits) (int64, bool)
	limit func(v1alpha1.RunLimits) (int64, bool)
	run   func(*v1alpha1.ResearchRunSpec) (int64, bool)
}

// The names of the tier fields whose spec.limits field has the same name.
const (
	fieldMaxSteps    = "maxSteps"
	fieldMaxAttempts = "maxAttempts"
)

// runPath is where a run sets a field: spec.<parts>.
func runPath(parts ...string) []string { return append([]string{"spec"}, parts...) }

// budgetPath is where a run sets the budget field name.
func budgetPath(name string) []string { return runPath("budget", name) }

// TierFields lists the six, in the order of their messages.
var TierFields = []TierField{
	{Name: "modelRequests", Limit: "maxModelRequests", Path: budgetPath("modelRequests"),
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return i64(t.ModelRequests) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return i64(l.MaxModelRequests) },
		run: func(s *v1alpha1.ResearchRunSpec) (int64, bool) {
			return s.Budget.ModelRequests, s.Budget.ModelRequests > 0
		}},
	{Name: "toolCalls", Limit: "maxToolCalls", Path: budgetPath("toolCalls"),
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return i64(t.ToolCalls) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return i64(l.MaxToolCalls) },
		run:   func(s *v1alpha1.ResearchRunSpec) (int64, bool) { return s.Budget.ToolCalls, true }},
	{Name: "tokens", Limit: "maxTokens", Path: budgetPath("tokens"),
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return i64(t.Tokens) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return i64(l.MaxTokens) },
		run:   func(s *v1alpha1.ResearchRunSpec) (int64, bool) { return i64(s.Budget.Tokens) }},
	{Name: fieldMaxSteps, Limit: fieldMaxSteps, Path: runPath("gates", fieldMaxSteps),
		Builtin: int64(v1alpha1.DefaultRunMaxSteps), HasBuiltin: true,
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return i32(t.MaxSteps) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return i32(l.MaxSteps) },
		run: func(s *v1alpha1.ResearchRunSpec) (int64, bool) {
			return int64(s.Gates.MaxSteps), s.Gates.MaxSteps > 0
		}},
	{Name: "deadline", Limit: "maxDeadline", Path: budgetPath("deadline"),
		Builtin: int64(v1alpha1.DefaultRunDeadline), HasBuiltin: true, Duration: true,
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return dur(t.Deadline) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return dur(l.MaxDeadline) },
		run:   func(s *v1alpha1.ResearchRunSpec) (int64, bool) { return dur(s.Budget.Deadline) }},
	{Name: fieldMaxAttempts, Limit: fieldMaxAttempts, Path: runPath("recovery", fieldMaxAttempts),
		Builtin: int64(v1alpha1.DefaultRunMaxAttempts), HasBuiltin: true,
		tier:  func(t v1alpha1.TierLimits) (int64, bool) { return i32(t.MaxAttempts) },
		limit: func(l v1alpha1.RunLimits) (int64, bool) { return i32(l.MaxAttempts) },
		run: func(s *v1alpha1.ResearchRunSpec) (int64, bool) {
			return int64(s.Recovery.MaxAttempts), s.Recovery.MaxAttempts > 0
		}},
}

func i64(p *int64) (int64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

func i32(p *int32) (int64, bool) {
	if p == nil {
		return 0, false
	}
	return int64(*p), true
}

func dur(p *metav1.Duration) (int64, bool) {
	if p == nil {
		return 0, false
	}
	return int64(p.Duration), true
}

// Cap is the tier's cap of the field, if it sets one.
func (f TierField) Cap(t *v1alpha1.Tier) (int64, bool) {
	if t == nil {
		return 0, false
	}
	return f.tier(t.Caps)
}

// Bound is the policy's spec.limits bound of the field, if it sets one.
func (f TierField) Bound(l v1alpha1.RunLimits) (int64, bool) { return f.limit(l) }

// Of is the run's own value of the field, if the typed spec tells it set
// (toolCalls always reads as set: 0 is a value).
func (f TierField) Of(s *v1alpha1.ResearchRunSpec) (int64, bool) { return f.run(s) }

// Default is what a run of tier t gets when it leaves the field unset: the
// tier's default; else the built-in default, lowered to the tier's cap;
// else nothing (the run must set it). t may be nil (a policy without tiers):
// the built-in default, as it is.
func (f TierField) Default(t *v1alpha1.Tier) (int64, bool) {
	if t != nil {
		if v, ok := f.tier(t.Defaults); ok {
			return v, true
		}
	}
	if !f.HasBuiltin {
		return 0, false
	}
	if c, ok := f.Cap(t); ok && c < f.Builtin {
		return c, true
	}
	return f.Builtin, true
}

// JSON is v as the run's JSON field holds it: a number, or a duration
// string in its shortest form ("30m", "2h30m").
func (f TierField) JSON(v int64) any {
	if f.Duration {
		return ShortDuration(time.Duration(v))
	}
	return v
}

// Format is v for a message.
func (f TierField) Format(v int64) string {
	if f.Duration {
		return ShortDuration(time.Duration(v))
	}
	return fmt.Sprint(v)
}

// RunPath is the field's path in a run, for errors.
func (f TierField) RunPath() *field.Path {
	return field.NewPath(f.Path[0], f.Path[1:]...)
}

// ShortDuration is d.String() without the zero units it ends with: "30m"
// for 30m0s, "2h" for 2h0m0s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ResolveTier is the tier a run that names tier (possibly "") runs under in
// policy p: its own, or p's defaultTier. It returns the resolved name and
// the tier; the tier is nil when p has no tiers (and the name is then "")
// or when the name is not one of p's tiers (ok is false then, and also when
// a run names a tier of a policy that has none).
func ResolveTier(p *v1alpha1.RuntimePolicySpec, tier string) (name string, t *v1alpha1.Tier, ok bool) {
	if len(p.Tiers) == 0 {
		return "", nil, tier == ""
	}
	name = tier
	if name == "" {
		name = p.DefaultTier
	}
	for i := range p.Tiers {
		if p.Tiers[i].Name == name {
			return name, &p.Tiers[i], true
		}
	}
	return name, nil, false
}

// TierNames lists p's tiers, quoted, for messages.
func TierNames(p *v1alpha1.RuntimePolicySpec) string {
	names := make([]string, 0, len(p.Tiers))
	for _, t := range p.Tiers {
		names = append(names, t.Name)
	}
	return quoteAll(names)
}

// validateTiers checks the tiers: unique names, a defaultTier that names
// one of them, defaults within caps, caps and defaults within spec.limits.
// The CRD's CEL rules catch the first three before the webhook sees the
// policy; these keep the Valid condition honest for a policy admitted
// without them.
func validateTiers(spec *v1alpha1.RuntimePolicySpec, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	tiersPath := specPath.Child("tiers")
	seen := map[string]int{}
	for i, t := range spec.Tiers {
		p := tiersPath.Index(i)
		if j, dup := seen[t.Name]; dup {
			errs = append(errs, withDetail(field.ErrorTypeDuplicate, p.Child("name"), t.Name, RuleUniqueName,
				"tier %q: tier names must be unique, and spec.tiers[%d] already uses it; runs pick a tier by name", t.Name, j))
			continue
		}
		seen[t.Name] = i
		errs = append(errs, validateTier(&t, spec.Limits, p)...)
	}
	switch _, known := seen[spec.DefaultTier]; {
	case len(spec.Tiers) > 0 && spec.DefaultTier == "":
		errs = append(errs, field.Required(specPath.Child("defaultTier"), fmt.Sprintf(
			"a policy with tiers needs a defaultTier, the tier of a run that names none (spec.tiers has %s)",
			TierNames(spec))).WithOrigin(RuleDefaultTierKnown))
	case spec.DefaultTier != "" && !known:
		errs = append(errs, field.Invalid(specPath.Child("defaultTier"), spec.DefaultTier, fmt.Sprintf(
			"names no tier of spec.tiers (%s)", orNone(TierNames(spec)))).WithOrigin(RuleDefaultTierKnown))
	}
	return errs
}

func orNone(s string) string {
	if s == "" {
		return "it has none"
	}
	return "it has " + s
}

// validateTier checks one tier's defaults against its caps and both against
// the policy's limits.
func validateTier(t *v1alpha1.Tier, limits v1alpha1.RunLimits, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range TierFields {
		c, hasCap := f.tier(t.Caps)
		d, hasDefault := f.tier(t.Defaults)
		l, hasLimit := f.limit(limits)
		if hasDefault && hasCap && d > c {
			errs = append(errs, field.Invalid(p.Child("defaults", f.Name), f.JSON(d), fmt.Sprintf(
				"tier %q: exceeds the tier's own caps.%s (%s); a default must be a value its runs may ask for",
				t.Name, f.Name, f.Format(c))).WithOrigin(RuleTierDefaultsWithinCaps))
		}
		if !hasLimit {
			continue
		}
		if hasCap && c > l {
			errs = append(errs, field.Invalid(p.Child("caps", f.Name), f.JSON(c), fmt.Sprintf(
				"tier %q: exceeds spec.limits.%s (%s); limits bound every run whatever its tier, so raise the limit or lower the cap",
				t.Name, f.Limit, f.Format(l))).WithOrigin(RuleTierWithinLimits))
		}
		if hasDefault && d > l {
			errs = append(errs, field.Invalid(p.Child("defaults", f.Name), f.JSON(d), fmt.Sprintf(
				"tier %q: exceeds spec.limits.%s (%s); no run could be admitted with this default",
				t.Name, f.Limit, f.Format(l))).WithOrigin(RuleTierWithinLimits))
		}
	}
	return errs
}
