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

package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
)

// tierPath is spec.tier of a run.
var tierPath = field.NewPath("spec", "tier")

// TierDefaulter resolves a new run's tier and fills what the run leaves
// unset. On create it reads the run's Session and RuntimePolicy; the tier is
// the run's spec.tier or the policy's defaultTier, and it writes the
// resolved name to spec.tier. Each of spec.budget.modelRequests, toolCalls,
// tokens, deadline, spec.gates.maxSteps and spec.recovery.maxAttempts that
// the request leaves out gets the tier's default, else the built-in default
// (deadline 30m, maxSteps 20, maxAttempts 3, lowered to the tier's cap), so
// that the stored run says what it runs with. A policy without tiers gets
// the built-in defaults alone, which the CRD used to apply.
//
// On update it looks at no policy: a field the request leaves out keeps the
// stored value, so that re-applying the manifest a run was created from
// (kubectl apply --server-side, kubectl replace, a GitOps sync) is no change
// of the immutable spec. Idempotent: a field the request sets is never
// touched.
//
// A missing Session or policy, or a tier the policy does not have, is left
// to the validating webhook to refuse.
type TierDefaulter struct {
	Reader client.Reader
}

var _ admission.Handler = (*TierDefaulter)(nil)

// Handle implements admission.Handler.
func (d *TierDefaulter) Handle(ctx context.Context, req admission.Request) admission.Response {
	obj := map[string]any{}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var ops []jsonpatch.Operation
	switch req.Operation {
	case admissionv1.Create:
		run := &v1alpha1.ResearchRun{}
		if err := json.Unmarshal(req.Object.Raw, run); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if run.Namespace == "" {
			run.Namespace = req.Namespace
		}
		p, err := d.policyOf(ctx, run)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if p == nil {
			return admission.Allowed("")
		}
		ops = tierDefaults(obj, run, &p.Spec)
	case admissionv1.Update:
		old := map[string]any{}
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		ops = keepAdmitted(obj, old)
	default:
		return admission.Allowed("")
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("tier defaults", ops...)
}

// policyOf reads the run's Session and its RuntimePolicy; nil (and no
// error) when either does not exist.
func (d *TierDefaulter) policyOf(ctx context.Context, run *v1alpha1.ResearchRun) (*v1alpha1.RuntimePolicy, error) {
	s := &v1alpha1.Session{}
	err := d.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Session %q: %w", run.Spec.SessionRef.Name, err)
	}
	p := &v1alpha1.RuntimePolicy{}
	err = d.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: s.Spec.PolicyRef.Name}, p)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading RuntimePolicy %q: %w", s.Spec.PolicyRef.Name, err)
	}
	return p, nil
}

// tierDefaults is the patch that writes a new run's resolved tier and the
// defaults of what it leaves unset (obj is the request's object; it is
// changed as the patch would change it).
func tierDefaults(obj map[string]any, run *v1alpha1.ResearchRun, p *v1alpha1.RuntimePolicySpec) []jsonpatch.Operation {
	name, tier, ok := policy.ResolveTier(p, run.Spec.Tier)
	if !ok {
		return nil
	}
	var ops []jsonpatch.Operation
	if run.Spec.Tier == "" && name != "" {
		ops = addAt(obj, ops, []string{"spec", "tier"}, name)
	}
	for _, f := range policy.TierFields {
		if has(obj, f.Path) {
			continue
		}
		if v, ok := f.Default(tier); ok {
			ops = addAt(obj, ops, f.Path, f.JSON(v))
		}
	}
	return ops
}

// keepAdmitted is the patch that gives back, on an update, the tier and the
// tier-defaulted fields the request leaves out, from the stored run.
func keepAdmitted(obj, old map[string]any) []jsonpatch.Operation {
	paths := make([][]string, 0, 1+len(policy.TierFields))
	paths = append(paths, []string{"spec", "tier"})
	for _, f := range policy.TierFields {
		paths = append(paths, f.Path)
	}
	var ops []jsonpatch.Operation
	for _, path := range paths {
		if v, ok := lookup(old, path); ok && !has(obj, path) {
			ops = addAt(obj, ops, path, v)
		}
	}
	return ops
}

// lookup is the value at path in obj.
func lookup(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func has(obj map[string]any, path []string) bool {
	v, ok := lookup(obj, path)
	return ok && v != nil
}

// addAt appends to ops the operations that set path to value in obj,
// adding missing parent objects first, and applies them to obj.
func addAt(obj map[string]any, ops []jsonpatch.Operation, path []string, value any) []jsonpatch.Operation {
	cur := obj
	for i, k := range path[:len(path)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
			ops = append(ops, jsonpatch.NewOperation("add", pointer(path[:i+1]), map[string]any{}))
		}
		cur = next
	}
	cur[path[len(path)-1]] = value
	return append(ops, jsonpatch.NewOperation("add", pointer(path), value))
}

func pointer(path []string) string { return "/" + strings.Join(path, "/") }

// requestHas says whether the object of the admission request in ctx sets
// path; true when ctx carries no request (nothing can be told).
func requestHas(ctx context.Context, path []string) bool {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || len(req.Object.Raw) == 0 {
		return true
	}
	obj := map[string]any{}
	if json.Unmarshal(req.Object.Raw, &obj) != nil {
		return true
	}
	return has(obj, path)
}

// tierErrors checks a new run against its tier: the tier exists, every
// field it caps is within the cap, tokens are budgeted when it caps them,
// and the budget the run must set (no default from the tier) is set. A
// field the run leaves unset is checked at the value the run will run
// with: the built-in default (the mutating webhook has written the tier's).
func tierErrors(ctx context.Context, run *v1alpha1.ResearchRun, p *v1alpha1.RuntimePolicy) field.ErrorList {
	name, tier, ok := policy.ResolveTier(&p.Spec, run.Spec.Tier)
	switch {
	case !ok && len(p.Spec.Tiers) == 0:
		return field.ErrorList{field.Invalid(tierPath, run.Spec.Tier, fmt.Sprintf(
			"RuntimePolicy %q defines no tiers (spec.tiers); leave spec.tier unset", p.Name))}
	case !ok:
		return field.ErrorList{field.Invalid(tierPath, name, fmt.Sprintf(
			"RuntimePolicy %q has no tier %q; its tiers are %s", p.Name, name, policy.TierNames(&p.Spec)))}
	}
	var errs field.ErrorList
	for _, f := range policy.TierFields {
		v, set := f.Of(&run.Spec)
		if f.Name == "toolCalls" {
			set = requestHas(ctx, f.Path)
		}
		if !set && f.HasBuiltin {
			v, set = f.Builtin, true
		}
		c, capped := f.Cap(tier)
		switch {
		case !set && f.Name == "tokens" && capped:
			errs = append(errs, field.Required(f.RunPath(), fmt.Sprintf(
				"tier %q caps tokens at %s (RuntimePolicy %q spec.tiers[%s].caps.tokens), so the run must budget them",
				name, f.Format(c), p.Name, name)))
		case !set && f.Name != "tokens":
			errs = append(errs, field.Required(f.RunPath(), mustSet(f, name, p.Name)))
		case set && capped && v > c:
			errs = append(errs, field.Invalid(f.RunPath(), f.JSON(v), fmt.Sprintf(
				"exceeds tier %q's cap of %s (RuntimePolicy %q spec.tiers[%s].caps.%s)",
				name, f.Format(c), p.Name, name, f.Name)))
		}
	}
	return errs
}

// mustSet says why a run must set a field nothing defaults.
func mustSet(f policy.TierField, tier, policyName string) string {
	if tier == "" {
		return fmt.Sprintf("the run must set it (RuntimePolicy %q has no tiers whose defaults could fill it)", policyName)
	}
	return fmt.Sprintf("the run must set it: tier %q of RuntimePolicy %q has no defaults.%s", tier, policyName, f.Name)
}

// runMutator runs the ResearchRun mutations in turn on the request as it
// came, and joins their patches (they touch disjoint fields); the first
// refusal wins.
type runMutator []admission.Handler

// Handle implements admission.Handler.
func (m runMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	var ops []jsonpatch.Operation
	var what []string
	for _, h := range m {
		r := h.Handle(ctx, req)
		if !r.Allowed {
			return r
		}
		if len(r.Patches) > 0 {
			ops = append(ops, r.Patches...)
			if r.Result != nil && r.Result.Message != "" {
				what = append(what, r.Result.Message)
			}
		}
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched(strings.Join(what, "; "), ops...)
}
