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

// Package argocd_test runs the Argo CD health checks of config/argocd with
// gopher-lua, the interpreter Argo CD runs them with, the way Argo CD calls
// them: the object (as unstructured JSON) in the global obj, the answer a
// table {status, message}.
package argocd_test

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// toLua converts unstructured content the way Argo CD's lua VM does:
// maps to tables, slices to arrays (1-based), numbers to numbers.
func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range x {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case int64:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	case nil:
		return lua.LNil
	}
	panic("unexpected type in unstructured content")
}

type health struct{ status, message string }

func runHealth(t *testing.T, script string, obj runtime.Object) health {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, content))
	if err := L.DoString(script); err != nil {
		t.Fatalf("the health script failed: %v", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health script returned %s, want a table", L.Get(-1).Type())
	}
	return health{status: ret.RawGetString("status").String(), message: ret.RawGetString("message").String()}
}

func script(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))}
}

// runIn is a run as the operator writes it in this phase: the conditions
// of internal/lifecycle's conditions() (Ready, Reconciling, Stalled).
func runIn(phase v1alpha1.Phase, reason v1alpha1.Reason, settlement v1alpha1.Settlement, extra ...metav1.Condition) *v1alpha1.ResearchRun {
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	msg := "used 3 of 10 model requests"
	st := v1alpha1.ResearchRunStatus{ObservedGeneration: 1, Phase: phase, Reason: reason, Settlement: settlement, Message: msg}
	switch {
	case phase != v1alpha1.PhaseTerminated && phase == v1alpha1.PhaseRunning:
		st.Conditions = []metav1.Condition{cond("Ready", T, "Running", msg), cond("Reconciling", T, "Running", msg)}
	case phase != v1alpha1.PhaseTerminated:
		st.Conditions = []metav1.Condition{cond("Ready", F, string(phase), msg), cond("Reconciling", T, string(phase), msg)}
	case reason == v1alpha1.ReasonCompleted || settlement == v1alpha1.SettlementPartial:
		st.Conditions = []metav1.Condition{cond("Ready", T, string(reason), msg), cond("Reconciling", F, "Terminated", msg)}
	default:
		st.Conditions = []metav1.Condition{cond("Ready", F, string(reason), msg), cond("Reconciling", F, "Terminated", msg),
			cond("Stalled", T, string(reason), msg)}
	}
	st.Conditions = append(st.Conditions, extra...)
	return &v1alpha1.ResearchRun{TypeMeta: metav1.TypeMeta{APIVersion: "agentrun.dev/v1alpha1", Kind: "ResearchRun"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "digest", Generation: 1}, Status: st}
}

func TestResearchRunHealthInEveryPhase(t *testing.T) {
	src := script(t, "researchrun_health.lua")
	awaiting := cond("AwaitingApproval", metav1.ConditionTrue, "ApprovalRequested", "report.publish (a1) waits for an approval")
	noLonger := cond("AwaitingApproval", metav1.ConditionFalse, "NoApprovalPending", "")
	fresh := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Name: "new"},
		Status: v1alpha1.ResearchRunStatus{ObservedGeneration: -1}}
	for name, tc := range map[string]struct {
		run         *v1alpha1.ResearchRun
		want        string
		wantMessage string
	}{
		"not yet admitted":       {fresh, "Progressing", "Waiting for the operator"},
		"Pending":                {runIn(v1alpha1.PhasePending, "", ""), "Progressing", "Pending: used 3"},
		"Queued":                 {runIn(v1alpha1.PhaseQueued, "", ""), "Progressing", "Queued"},
		"Running":                {runIn(v1alpha1.PhaseRunning, "", "", noLonger), "Progressing", "Running: used 3"},
		"Running, approval":      {runIn(v1alpha1.PhaseRunning, "", "", awaiting), "Suspended", "report.publish (a1)"},
		"Recovering":             {runIn(v1alpha1.PhaseRecovering, "", ""), "Progressing", "Recovering"},
		"Finalizing":             {runIn(v1alpha1.PhaseFinalizing, v1alpha1.ReasonBudgetExhausted, ""), "Progressing", "Finalizing"},
		"Completed":              {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted, v1alpha1.SettlementComplete), "Healthy", "Terminated (Completed)"},
		"limit, partial":         {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted, v1alpha1.SettlementPartial), "Healthy", "BudgetExhausted"},
		"limit, nothing":         {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonBudgetExhausted, v1alpha1.SettlementNone), "Degraded", "BudgetExhausted"},
		"AgentFailed":            {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonAgentFailed, v1alpha1.SettlementNone), "Degraded", "AgentFailed"},
		"QueueTimeout":           {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueTimeout, v1alpha1.SettlementNone), "Degraded", "QueueTimeout"},
		"RecoveryExhausted":      {runIn(v1alpha1.PhaseTerminated, v1alpha1.ReasonRecoveryExhausted, v1alpha1.SettlementNone), "Degraded", "RecoveryExhausted"},
		"Terminated, no reading": {&v1alpha1.ResearchRun{Status: v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseTerminated}}, "Degraded", "Terminated"},
	} {
		t.Run(name, func(t *testing.T) {
			got := runHealth(t, src, tc.run)
			if got.status != tc.want || !strings.Contains(got.message, tc.wantMessage) {
				t.Errorf("health %q %q, want %q with %q", got.status, got.message, tc.want, tc.wantMessage)
			}
		})
	}
}

func TestSessionAndRuntimePolicyHealth(t *testing.T) {
	src := script(t, "kstatus_health.lua")
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	session := func(gen, observed int64, cs ...metav1.Condition) *v1alpha1.Session {
		return &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: gen},
			Status: v1alpha1.SessionStatus{ObservedGeneration: observed, Conditions: cs}}
	}
	policy := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2},
		Status: v1alpha1.RuntimePolicyStatus{ObservedGeneration: 2, Conditions: []metav1.Condition{
			cond("Ready", F, "Invalid", "spec.tools[0].risk"), cond("Stalled", T, "Invalid", "spec.tools[0].risk: unknown")}}}
	for name, tc := range map[string]struct {
		obj  runtime.Object
		want string
	}{
		"Session ready":            {session(1, 1, cond("Ready", T, "Valid", ""), cond("Reconciling", F, "Valid", "")), "Healthy"},
		"Session, policy missing":  {session(1, 1, cond("Ready", F, "PolicyMissing", ""), cond("Reconciling", T, "PolicyMissing", "p")), "Progressing"},
		"Session, old generation":  {session(3, 2, cond("Ready", T, "Valid", "")), "Progressing"},
		"Session invalid":          {session(1, 1, cond("Stalled", T, "Invalid", "spec.queue")), "Degraded"},
		"RuntimePolicy invalid":    {policy, "Degraded"},
		"RuntimePolicy unobserved": {&v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Generation: 1}}, "Progressing"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := runHealth(t, src, tc.obj); got.status != tc.want {
				t.Errorf("health %q (%s), want %q", got.status, got.message, tc.want)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite argocd-cm-patch.yaml from the scripts")

// configMap is the argocd-cm patch: the scripts verbatim, under the keys
// Argo CD reads (resource.customizations.health.<group>_<kind>).
type configMap struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   map[string]string `json:"metadata"`
	Data       map[string]string `json:"data"`
}

var scripts = map[string]string{
	"resource.customizations.health.agentrun.dev_ResearchRun":   "researchrun_health.lua",
	"resource.customizations.health.agentrun.dev_Session":       "kstatus_health.lua",
	"resource.customizations.health.agentrun.dev_RuntimePolicy": "kstatus_health.lua",
}

func TestArgoCDConfigMapCarriesTheScripts(t *testing.T) {
	if *update {
		cm := configMap{APIVersion: "v1", Kind: "ConfigMap",
			Metadata: map[string]string{"name": "argocd-cm", "namespace": "argocd"}, Data: map[string]string{}}
		for key, file := range scripts {
			cm.Data[key] = script(t, file)
		}
		out, err := yaml.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		header := "# Generated from the *.lua files beside it by: go test ./config/argocd -run ConfigMap -update\n" +
			"# Merge into Argo CD's argocd-cm (kubectl -n argocd patch configmap argocd-cm --patch-file ...).\n"
		if err := os.WriteFile("argocd-cm-patch.yaml", append([]byte(header), out...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cm configMap
	raw, err := os.ReadFile("argocd-cm-patch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	for key, file := range scripts {
		if got, want := cm.Data[key], script(t, file); got != want {
			t.Errorf("argocd-cm-patch.yaml %s differs from %s: go test ./config/argocd -run ConfigMap -update", key, file)
		}
	}
}
