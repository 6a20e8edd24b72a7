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

// Unit tests of tier resolution, defaults and caps: no API server (the
// envtest story is in tier_stories_test.go). Run alone with
// go test -run 'Tier|KeepAdmitted' ./internal/webhook/v1alpha1/.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// tieredPolicy has quick (the default: maxSteps cap 30, default 10; a
// 10m deadline cap; budget defaults) and deep (maxSteps cap 300; no budget
// defaults; a 2h deadline default).
func tieredPolicy() *v1alpha1.RuntimePolicy {
	return &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: v1alpha1.RuntimePolicySpec{
			DefaultTier: "quick",
			Tiers: []v1alpha1.Tier{
				{Name: "quick",
					Caps: v1alpha1.TierLimits{ModelRequests: ptr.To[int64](50), ToolCalls: ptr.To[int64](40), Tokens: ptr.To[int64](100000),
						MaxSteps: ptr.To[int32](30), Deadline: &metav1.Duration{Duration: 10 * time.Minute}, MaxAttempts: ptr.To[int32](2)},
					Defaults: v1alpha1.TierLimits{ModelRequests: ptr.To[int64](20), ToolCalls: ptr.To[int64](20), Tokens: ptr.To[int64](50000),
						MaxSteps: ptr.To[int32](10)}},
				{Name: "deep",
					Caps:     v1alpha1.TierLimits{MaxSteps: ptr.To[int32](300), MaxAttempts: ptr.To[int32](5)},
					Defaults: v1alpha1.TierLimits{Deadline: &metav1.Duration{Duration: 2 * time.Hour}, MaxSteps: ptr.To[int32](150)}},
			},
		},
	}
}

// rawRun is a run's JSON as the API server hands it to the mutating
// webhook: spec.gates and spec.recovery are there (the CRD defaults them
// to {}), the rest is what the test gives.
func rawRun(t *testing.T, spec string) map[string]any {
	t.Helper()
	obj := map[string]any{}
	body := `{"apiVersion":"agentrun.dev/v1alpha1","kind":"ResearchRun","metadata":{"name":"r","namespace":"ns"},` +
		`"spec":{"sessionRef":{"name":"s"},"goal":"g","template":{"spec":{"containers":[{"name":"a","image":"i"}]}},` +
		`"gates":{},"recovery":{}` + spec + `}}`
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return obj
}

func typed(t *testing.T, obj map[string]any) *v1alpha1.ResearchRun {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.ResearchRun{}
	if err := json.Unmarshal(raw, run); err != nil {
		t.Fatal(err)
	}
	return run
}

// opsOf renders a patch as path → value.
func opsOf(t *testing.T, ops []jsonpatch.Operation) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, op := range ops {
		if op.Operation != "add" {
			t.Errorf("op %v: want only adds", op)
		}
		if _, dup := out[op.Path]; dup {
			t.Errorf("path %s patched twice", op.Path)
		}
		out[op.Path] = op.Value
	}
	return out
}

func TestTierDefaults(t *testing.T) {
	noTiers := &v1alpha1.RuntimePolicySpec{}
	tiered := &tieredPolicy().Spec
	builtin := map[string]any{"/spec/gates/maxSteps": int64(20), "/spec/budget/deadline": "30m", "/spec/recovery/maxAttempts": int64(3)}
	cases := []struct {
		name   string
		policy *v1alpha1.RuntimePolicySpec
		spec   string
		want   map[string]any
	}{
		{"no tiers: the built-in defaults the CRD used to apply, and nothing else", noTiers,
			`,"budget":{"modelRequests":10,"toolCalls":10}`, builtin},
		{"no tiers: what the run sets stays", noTiers,
			`,"budget":{"modelRequests":10,"toolCalls":10,"deadline":"1h"},"gates":{"maxSteps":7}`,
			map[string]any{"/spec/recovery/maxAttempts": int64(3)}},
		{"no tier named: the default tier, its defaults, the built-in ones lowered to its caps", tiered, `,"budget":{}`,
			map[string]any{"/spec/tier": "quick", "/spec/budget/modelRequests": int64(20), "/spec/budget/toolCalls": int64(20),
				"/spec/budget/tokens": int64(50000), "/spec/gates/maxSteps": int64(10), "/spec/budget/deadline": "10m",
				"/spec/recovery/maxAttempts": int64(2)}},
		{"deep named: its defaults; no budget default, so none is written", tiered, `,"tier":"deep","budget":{}`,
			map[string]any{"/spec/gates/maxSteps": int64(150), "/spec/budget/deadline": "2h", "/spec/recovery/maxAttempts": int64(3)}},
		{"explicit values win, an explicit toolCalls 0 too", tiered,
			`,"budget":{"modelRequests":5,"toolCalls":0,"tokens":9,"deadline":"1m"},"gates":{"maxSteps":3},"recovery":{"maxAttempts":1}`,
			map[string]any{"/spec/tier": "quick"}},
		{"no budget object: it is added before its fields", tiered, `,"tier":"deep"`,
			map[string]any{"/spec/budget": map[string]any{}, "/spec/gates/maxSteps": int64(150), "/spec/budget/deadline": "2h",
				"/spec/recovery/maxAttempts": int64(3)}},
		{"a tier the policy does not have: nothing (the validator refuses)", tiered, `,"tier":"huge","budget":{}`, map[string]any{}},
		{"a tier on a policy without tiers: nothing (the validator refuses)", noTiers, `,"tier":"deep","budget":{}`, map[string]any{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := rawRun(t, tc.spec)
			got := opsOf(t, tierDefaults(obj, typed(t, obj), tc.policy))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			// Idempotent: the patched object needs nothing more.
			if again := tierDefaults(obj, typed(t, obj), tc.policy); len(again) > 0 {
				t.Errorf("a second pass patches again: %v", again)
			}
		})
	}
}

func TestKeepAdmitted(t *testing.T) {
	old := rawRun(t, `,"tier":"deep","budget":{"modelRequests":40,"toolCalls":0,"deadline":"2h"},"gates":{"maxSteps":150},"recovery":{"maxAttempts":3}`)
	// The manifest the run was created from, re-applied: the defaults the
	// webhook wrote come back from the stored run; what it sets stays.
	obj := rawRun(t, `,"budget":{"modelRequests":40},"gates":{"maxSteps":150}`)
	got := opsOf(t, keepAdmitted(obj, old))
	want := map[string]any{"/spec/tier": "deep", "/spec/budget/toolCalls": float64(0), "/spec/budget/deadline": "2h",
		"/spec/recovery/maxAttempts": float64(3)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	// A run stored without a field (created before tiers, or with the
	// webhook bypassed) gets none on update.
	if ops := keepAdmitted(rawRun(t, `,"budget":{"modelRequests":1,"toolCalls":1}`), rawRun(t, `,"budget":{"modelRequests":1,"toolCalls":1}`)); len(ops) > 0 {
		t.Errorf("nothing stored, yet patched: %v", ops)
	}
}

func testReader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func testSession() *v1alpha1.Session {
	return &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
		Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}}}
}

func request(t *testing.T, op admissionv1.Operation, obj, old map[string]any) admission.Request {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: "ns"}}
	var err error
	if req.Object.Raw, err = json.Marshal(obj); err != nil {
		t.Fatal(err)
	}
	if old != nil {
		if req.OldObject.Raw, err = json.Marshal(old); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

func TestTierDefaulterHandle(t *testing.T) {
	ctx := context.Background()
	d := &TierDefaulter{Reader: testReader(t, tieredPolicy(), testSession())}
	r := d.Handle(ctx, request(t, admissionv1.Create, rawRun(t, `,"tier":"deep","budget":{"modelRequests":9,"toolCalls":9}`), nil))
	if !r.Allowed {
		t.Fatalf("create refused: %v", r.Result)
	}
	want := map[string]any{"/spec/gates/maxSteps": int64(150), "/spec/budget/deadline": "2h", "/spec/recovery/maxAttempts": int64(3)}
	if diff := cmp.Diff(want, opsOf(t, r.Patches)); diff != "" {
		t.Errorf("create patch (-want +got):\n%s", diff)
	}

	orphan := rawRun(t, `,"budget":{}`)
	orphan["spec"].(map[string]any)["sessionRef"] = map[string]any{"name": "gone"}
	if r := d.Handle(ctx, request(t, admissionv1.Create, orphan, nil)); !r.Allowed || len(r.Patches) > 0 {
		t.Errorf("a run of a missing Session: allowed %v, patches %v; want allowed, untouched (the validator refuses)", r.Allowed, r.Patches)
	}

	stored := rawRun(t, `,"tier":"quick","budget":{"modelRequests":20,"toolCalls":20},"gates":{"maxSteps":10}`)
	r = d.Handle(ctx, request(t, admissionv1.Update, rawRun(t, `,"budget":{"modelRequests":20,"toolCalls":20}`), stored))
	if diff := cmp.Diff(map[string]any{"/spec/tier": "quick", "/spec/gates/maxSteps": float64(10)}, opsOf(t, r.Patches)); diff != "" {
		t.Errorf("update patch (-want +got):\n%s", diff)
	}
}

// tierRun is a run of session s that sets all six fields within quick's caps.
func tierRun(tier string) *v1alpha1.ResearchRun {
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: "s"},
			Tier:       tier,
			Goal:       "g",
			Template:   corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "i"}}}},
			Budget: v1alpha1.Budget{ModelRequests: 50, ToolCalls: 40, Tokens: ptr.To[int64](100000),
				Deadline: &metav1.Duration{Duration: 10 * time.Minute}},
			Gates:    v1alpha1.Gates{MaxSteps: 30},
			Recovery: v1alpha1.Recovery{MaxAttempts: 2},
		},
	}
}

func TestTierCaps(t *testing.T) {
	cases := []struct {
		name   string
		tier   string
		mutate func(*v1alpha1.ResearchRun)
		policy func(*v1alpha1.RuntimePolicy)
		want   []string // each in the error; none: admitted
	}{
		{"every field at quick's caps", "quick", func(*v1alpha1.ResearchRun) {}, nil, nil},
		{"modelRequests", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.ModelRequests = 51 }, nil,
			[]string{`spec.budget.modelRequests: Invalid value: 51: exceeds tier "quick"'s cap of 50 (RuntimePolicy "p" spec.tiers[quick].caps.modelRequests)`}},
		{"toolCalls", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.ToolCalls = 41 }, nil,
			[]string{`spec.budget.toolCalls: Invalid value: 41: exceeds tier "quick"'s cap of 40 (RuntimePolicy "p" spec.tiers[quick].caps.toolCalls)`}},
		{"tokens", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.Tokens = ptr.To[int64](100001) }, nil,
			[]string{`spec.budget.tokens: Invalid value: 100001: exceeds tier "quick"'s cap of 100000 (RuntimePolicy "p" spec.tiers[quick].caps.tokens)`}},
		{"tokens required by a cap", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.Tokens = nil }, nil,
			[]string{`spec.budget.tokens: Required value: tier "quick" caps tokens at 100000 (RuntimePolicy "p" spec.tiers[quick].caps.tokens), so the run must budget them`}},
		{"maxSteps", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 200 }, nil,
			[]string{`spec.gates.maxSteps: Invalid value: 200: exceeds tier "quick"'s cap of 30 (RuntimePolicy "p" spec.tiers[quick].caps.maxSteps)`}},
		{"deadline", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.Deadline = &metav1.Duration{Duration: 20 * time.Minute} }, nil,
			[]string{`spec.budget.deadline: Invalid value: "20m": exceeds tier "quick"'s cap of 10m (RuntimePolicy "p" spec.tiers[quick].caps.deadline)`}},
		{"a deadline left unset is checked at the built-in 30m", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.Deadline = nil }, nil,
			[]string{`spec.budget.deadline: Invalid value: "30m": exceeds tier "quick"'s cap of 10m`}},
		{"maxAttempts", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Recovery.MaxAttempts = 3 }, nil,
			[]string{`spec.recovery.maxAttempts: Invalid value: 3: exceeds tier "quick"'s cap of 2 (RuntimePolicy "p" spec.tiers[quick].caps.maxAttempts)`}},
		{"no tier named resolves to the default tier's caps", "", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 200 }, nil,
			[]string{`spec.gates.maxSteps: Invalid value: 200: exceeds tier "quick"'s cap of 30`}},
		{"deep takes 200 steps", "deep", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 200 }, nil, nil},
		{"deep, 301 steps", "deep", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 301 }, nil,
			[]string{`spec.gates.maxSteps: Invalid value: 301: exceeds tier "deep"'s cap of 300 (RuntimePolicy "p" spec.tiers[deep].caps.maxSteps)`}},
		{"several caps at once, each named", "quick", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps, r.Spec.Budget.ModelRequests = 31, 51 }, nil,
			[]string{"spec.budget.modelRequests: Invalid value: 51", "spec.gates.maxSteps: Invalid value: 31"}},
		{"a tier the policy does not have", "huge", func(*v1alpha1.ResearchRun) {}, nil,
			[]string{`spec.tier: Invalid value: "huge": RuntimePolicy "p" has no tier "huge"; its tiers are "quick", "deep"`}},
		{"modelRequests nothing defaults", "deep", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.ModelRequests = 0 }, nil,
			[]string{`spec.budget.modelRequests: Required value: the run must set it: tier "deep" of RuntimePolicy "p" has no defaults.modelRequests`}},
		{"a tier on a policy without tiers", "deep", func(*v1alpha1.ResearchRun) {}, func(p *v1alpha1.RuntimePolicy) { p.Spec.Tiers, p.Spec.DefaultTier = nil, "" },
			[]string{`spec.tier: Invalid value: "deep": RuntimePolicy "p" defines no tiers (spec.tiers); leave spec.tier unset`}},
		{"no tiers: a budget above caps that do not exist is fine", "", func(r *v1alpha1.ResearchRun) { r.Spec.Gates.MaxSteps = 1000 },
			func(p *v1alpha1.RuntimePolicy) { p.Spec.Tiers, p.Spec.DefaultTier = nil, "" }, nil},
		{"no tiers: modelRequests must be set", "", func(r *v1alpha1.ResearchRun) { r.Spec.Budget.ModelRequests = 0 },
			func(p *v1alpha1.RuntimePolicy) { p.Spec.Tiers, p.Spec.DefaultTier = nil, "" },
			[]string{`spec.budget.modelRequests: Required value: the run must set it (RuntimePolicy "p" has no tiers whose defaults could fill it)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tieredPolicy()
			if tc.policy != nil {
				tc.policy(p)
			}
			run := tierRun(tc.tier)
			tc.mutate(run)
			v := &ResearchRunValidator{Reader: testReader(t, p, testSession())}
			_, err := v.ValidateCreate(context.Background(), run)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("admitted; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
				}
			}
		})
	}
}

// TestTierToolCallsRequired: toolCalls 0 is a value, so whether the run
// set it is read from the request's JSON.
func TestTierToolCallsRequired(t *testing.T) {
	p := tieredPolicy()
	v := &ResearchRunValidator{Reader: testReader(t, p, testSession())}
	run := tierRun("deep")
	run.Spec.Budget.ToolCalls = 0
	for _, tc := range []struct {
		name string
		raw  string
		want string
	}{
		{"left out", `,"tier":"deep","budget":{"modelRequests":50}`,
			`spec.budget.toolCalls: Required value: the run must set it: tier "deep" of RuntimePolicy "p" has no defaults.toolCalls`},
		{"set to 0", `,"tier":"deep","budget":{"modelRequests":50,"toolCalls":0}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := admission.NewContextWithRequest(context.Background(), request(t, admissionv1.Create, rawRun(t, tc.raw), nil))
			_, err := v.ValidateCreate(ctx, run)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v; want %q", err, tc.want)
			}
		})
	}
}
