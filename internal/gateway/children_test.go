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

package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// parentRun is the test attempt's ResearchRun (the parent of its children).
func parentRun() *v1alpha1.ResearchRun {
	return &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: gatewaytest.Run, UID: gatewaytest.RunUID},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: "s"}, Goal: "survey the field", Tier: "standard",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}},
		},
	}
}

// childEnv is a gateway whose attempt may create children under lim, its
// run in the fake API server, and the door's child tools in its catalogue.
func childEnv(t *testing.T, lim *v1alpha1.ChildrenPolicy, mutate func(*v1alpha1.RunAttempt)) *gatewaytest.Env {
	return gatewaytest.Start(t, gatewaytest.Options{
		Objects: []client.Object{parentRun()},
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Policy.Children = lim
			ra.Spec.Policy.Tools = append(ra.Spec.Policy.Tools,
				v1alpha1.Tool{Name: gatewayapi.ToolRunSpawn, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
				v1alpha1.Tool{Name: gatewayapi.ToolRunChildren, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone})
			if mutate != nil {
				mutate(ra)
			}
		},
	})
}

var wide = &v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 64, MaxConcurrent: 64}

// spawn asks for a child through the agent API.
func spawn(t *testing.T, e *gatewaytest.Env, req gatewayapi.ChildRequest) (int, gatewayapi.Child, gatewayapi.ErrorBody) {
	t.Helper()
	raw, _ := json.Marshal(req)
	resp := e.Do(http.MethodPost, gatewayapi.PathPrefix+"/self/children", gatewaytest.Token, raw)
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	var c gatewayapi.Child
	var eb gatewayapi.ErrorBody
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	} else {
		_ = json.Unmarshal(body, &eb)
	}
	return resp.StatusCode, c, eb
}

func view(t *testing.T, e *gatewaytest.Env) gatewayapi.Attempt {
	t.Helper()
	resp := e.Do(http.MethodGet, gatewayapi.PathPrefix+"/self", gatewaytest.Token, nil)
	defer func() { _ = resp.Body.Close() }()
	var v gatewayapi.Attempt
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func task(name string, mr int64) gatewayapi.ChildRequest {
	return gatewayapi.ChildRequest{Name: name, Task: "read " + name, Budget: gatewayapi.ChildBudget{ModelRequests: mr, ToolCalls: 1}}
}

// TestSpawnCarvesDurablyThenCreatesTheChild: the carve is in the attempt's
// status before the child exists; the child is owned by the parent,
// labelled with parent and root, in its session, under its tier; the
// parent's grant shrinks by the carve; asking again is the same child.
func TestSpawnCarvesDurablyThenCreatesTheChild(t *testing.T) {
	e := childEnv(t, wide, nil)
	code, c, eb := spawn(t, e, task("a", 4))
	if code != http.StatusOK {
		t.Fatalf("spawn: %d %+v", code, eb)
	}
	if c.Name != "survey-a" || c.Carved.ModelRequests != 4 || c.Ended {
		t.Errorf("child %+v, want survey-a carved 4 and not ended", c)
	}
	if got := e.Status().Children; len(got) != 1 || got[0].Name != "survey-a" || got[0].Budget.ModelRequests != 4 {
		t.Errorf("status.children %+v, want the carve of survey-a (4 model requests)", got)
	}
	child := &v1alpha1.ResearchRun{}
	if err := e.Client.Get(t.Context(), types.NamespacedName{Namespace: gatewaytest.Namespace, Name: "survey-a"}, child); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(child, parentRun()) {
		t.Errorf("child's owners %+v, want the parent run", child.OwnerReferences)
	}
	want := v1alpha1.ParentRef{Name: gatewaytest.Run, UID: gatewaytest.RunUID, Attempt: 1, Root: gatewaytest.Run, Depth: 1}
	if child.Spec.Parent == nil || *child.Spec.Parent != want {
		t.Errorf("spec.parent %+v, want %+v", child.Spec.Parent, want)
	}
	if child.Labels[v1alpha1.LabelParent] != gatewaytest.Run || child.Labels[v1alpha1.LabelRoot] != gatewaytest.Run {
		t.Errorf("labels %v", child.Labels)
	}
	if child.Spec.SessionRef.Name != "s" || child.Spec.Tier != "standard" || child.Spec.Goal != "read a" ||
		child.Spec.Budget.ModelRequests != 4 {
		t.Errorf("child spec %+v", child.Spec)
	}
	if g := view(t, e).Grant.ModelRequests; g != 6 {
		t.Errorf("the parent's grant after carving 4 of 10: %d, want 6", g)
	}
	if code, again, _ := spawn(t, e, task("a", 4)); code != http.StatusOK || again.Name != "survey-a" {
		t.Errorf("asking again: %d %+v", code, again)
	}
	if n := len(e.Status().Children); n != 1 {
		t.Errorf("%d carves after asking twice for one child, want 1", n)
	}
}

// TestSpawnRefusalsNameTheLimit: depth, fan-out, concurrency and a budget
// beyond the working allowance are refused with the limit's name; nothing
// is carved or created.
func TestSpawnRefusalsNameTheLimit(t *testing.T) {
	cases := map[string]struct {
		lim       *v1alpha1.ChildrenPolicy
		before    []gatewayapi.ChildRequest
		req       gatewayapi.ChildRequest
		wantParam string
	}{
		"a policy without children":    {lim: nil, req: task("a", 1), wantParam: "children.maxDepth"},
		"beyond the fan-out":           {lim: &v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 1, MaxConcurrent: 4}, before: []gatewayapi.ChildRequest{task("a", 1)}, req: task("b", 1), wantParam: "children.maxChildren"},
		"beyond the concurrency":       {lim: &v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 4, MaxConcurrent: 1}, before: []gatewayapi.ChildRequest{task("a", 1)}, req: task("b", 1), wantParam: "children.maxConcurrent"},
		"beyond the working allowance": {lim: wide, before: []gatewayapi.ChildRequest{task("a", 6)}, req: task("b", 5), wantParam: "modelRequests"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := childEnv(t, tc.lim, nil)
			for _, b := range tc.before {
				if code, _, eb := spawn(t, e, b); code != http.StatusOK {
					t.Fatalf("setup spawn: %d %+v", code, eb)
				}
			}
			code, _, eb := spawn(t, e, tc.req)
			if code != http.StatusTooManyRequests || eb.Error.Code != gatewayapi.CodeChildRefused || eb.Error.Param != tc.wantParam {
				t.Errorf("got %d %+v, want 429 child_refused naming %s", code, eb.Error, tc.wantParam)
			}
			if n := len(e.Status().Children); n != len(tc.before) {
				t.Errorf("%d carves, want %d", n, len(tc.before))
			}
		})
	}
}

// TestSpawnRefusesBadInput: the field and the rule are named.
func TestSpawnRefusesBadInput(t *testing.T) {
	e := childEnv(t, wide, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Cost = new(v1alpha1.Money(5_000_000))
	})
	cases := map[string]struct {
		req   gatewayapi.ChildRequest
		param string
	}{
		"no task":               {gatewayapi.ChildRequest{Budget: gatewayapi.ChildBudget{ModelRequests: 1}}, "task"},
		"a name that is no DNS": {gatewayapi.ChildRequest{Name: "A_b", Task: "x", Budget: gatewayapi.ChildBudget{ModelRequests: 1}}, "name"},
		"cost budgeted, none asked": {gatewayapi.ChildRequest{Task: "x", Budget: gatewayapi.ChildBudget{ModelRequests: 1}},
			"budget.cost"},
	}
	for name, tc := range cases {
		code, _, eb := spawn(t, e, tc.req)
		if code != http.StatusBadRequest || eb.Error.Param != tc.param {
			t.Errorf("%s: %d %+v, want 400 naming %s", name, code, eb.Error, tc.param)
		}
	}
}

// TestConcurrentSpawnsNeverOverdraw: twenty children racing for a grant of
// 10 model requests, 3 each: exactly three are carved, 9 requests, and the
// parent keeps 1.
func TestConcurrentSpawnsNeverOverdraw(t *testing.T) {
	e := childEnv(t, wide, nil)
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Go(func() { codes[i], _, _ = spawn(t, e, task(fmt.Sprintf("c%d", i), 3)) })
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == http.StatusOK {
			ok++
		}
	}
	carved := int64(0)
	for _, c := range e.Status().Children {
		carved += c.Budget.ModelRequests
	}
	list := &v1alpha1.ResearchRunList{}
	if err := e.Client.List(t.Context(), list, client.MatchingLabels{v1alpha1.LabelParent: gatewaytest.Run}); err != nil {
		t.Fatal(err)
	}
	if ok != 3 || carved != 9 || len(list.Items) != 3 {
		t.Errorf("%d admitted, %d carved, %d children created; want 3, 9, 3", ok, carved, len(list.Items))
	}
	if g := view(t, e).Grant.ModelRequests; g != 1 {
		t.Errorf("the parent's own grant %d, want 1", g)
	}
}

// TestChildEndReturnsWhatItDidNotUse: a child seen Terminated is spent only
// as far as it used its carve; its end, reason, settlement and report are
// the parent's to read, through the agent API and the door.
func TestChildEndReturnsWhatItDidNotUse(t *testing.T) {
	e := childEnv(t, wide, nil)
	if code, _, eb := spawn(t, e, task("a", 4)); code != http.StatusOK {
		t.Fatalf("spawn: %d %+v", code, eb)
	}
	child := &v1alpha1.ResearchRun{}
	key := types.NamespacedName{Namespace: gatewaytest.Namespace, Name: "survey-a"}
	if err := e.Client.Get(t.Context(), key, child); err != nil {
		t.Fatal(err)
	}
	child.Status.Phase, child.Status.Reason, child.Status.Settlement = v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted, v1alpha1.SettlementComplete
	child.Status.Budget.Used = v1alpha1.Usage{ModelRequests: 1}
	if err := e.Client.Update(t.Context(), child); err != nil {
		t.Fatal(err)
	}
	report := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "survey-a-report", Labels: map[string]string{v1alpha1.LabelRun: "survey-a"}},
		Data:       map[string]string{"index.json": `{"sections":[{"name":"Findings"}]}`, "01-findings.md": "three papers"},
	}
	if err := e.Client.Create(t.Context(), report); err != nil {
		t.Fatal(err)
	}
	if g := view(t, e).Grant.ModelRequests; g != 9 {
		t.Errorf("the parent's grant once its child ended having used 1 of 4: %d, want 9", g)
	}
	resp := e.Do(http.MethodGet, gatewayapi.PathPrefix+"/self/children/survey-a", gatewaytest.Token, nil)
	var got gatewayapi.Child
	_ = json.NewDecoder(resp.Body).Decode(&got)
	_ = resp.Body.Close()
	if !got.Ended || got.Reason != v1alpha1.ReasonCompleted || got.Settlement != v1alpha1.SettlementComplete ||
		got.Report == nil || len(got.Report.Sections) != 1 || got.Report.Sections[0].Content != "three papers" {
		t.Errorf("the child as its parent reads it: %+v (report %+v)", got, got.Report)
	}

	cs := connectDoor(t, e, gatewaytest.Token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: gatewayapi.ToolRunChildren, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("run.children: %v %s", err, resultText(res))
	}
	var list gatewayapi.ChildList
	if err := json.Unmarshal([]byte(resultText(res)), &list); err != nil || len(list.Children) != 1 || !list.Children[0].Ended {
		t.Errorf("run.children: %s (%v)", resultText(res), err)
	}
}

// TestDoorSpawnsAChild: an MCP-only agent creates a child with run.spawn;
// a refusal comes back as a tool error naming the limit.
func TestDoorSpawnsAChild(t *testing.T) {
	e := childEnv(t, &v1alpha1.ChildrenPolicy{MaxDepth: 1, MaxChildren: 1, MaxConcurrent: 1}, nil)
	cs := connectDoor(t, e, gatewaytest.Token)
	args := map[string]any{"task": "read b", "name": "b", "budget": map[string]any{"modelRequests": 2}}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: gatewayapi.ToolRunSpawn, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("run.spawn: %v %s", err, resultText(res))
	}
	var c gatewayapi.Child
	if err := json.Unmarshal([]byte(resultText(res)), &c); err != nil || c.Name != "survey-b" || c.Carved.ModelRequests != 2 {
		t.Errorf("run.spawn answered %s (%v)", resultText(res), err)
	}
	args["name"] = "c"
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: gatewayapi.ToolRunSpawn, Arguments: args})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "children.maxChildren") {
		t.Errorf("a second child under maxChildren 1: %v %s", err, resultText(res))
	}
}
