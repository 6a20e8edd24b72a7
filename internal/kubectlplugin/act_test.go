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

package kubectlplugin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// waitingRun creates a Running run of its own namespace whose attempt 1
// waits for a decision on one action.
func waitingRun(t *testing.T, ns, name string) *v1alpha1.ResearchRun {
	t.Helper()
	c := cluster(t)
	ctx := context.Background()
	createNamespace(t, c, ns)
	rr := newRun(ns, name, "research", v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10})
	if err := c.Create(ctx, rr); err != nil {
		t.Fatal(err)
	}
	now := at(time.Now())
	rr.Status = v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning, Attempt: 1, StartTime: now.ago(time.Minute),
		PendingApprovals: []v1alpha1.ApprovalRequest{{ActionID: "report.publish-3f9a0c1d2e4b5a69", Tool: "report.publish",
			Risk: v1alpha1.RiskHigh, Attempt: 1, RequestedAt: now.ago(time.Second), ExpiresAt: now.in(15 * time.Minute)}}}
	if err := c.Status().Update(ctx, rr); err != nil {
		t.Fatal(err)
	}
	return rr
}

func approvals(t *testing.T, rr *v1alpha1.ResearchRun) []v1alpha1.Approval {
	t.Helper()
	var got v1alpha1.ResearchRun
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rr), &got); err != nil {
		t.Fatal(err)
	}
	return got.Spec.Approvals
}

func TestApproveAndDeny(t *testing.T) {
	rr := waitingRun(t, "decide", "deploy")
	now := time.Now()

	out, _, err := run(t, now, nil, "approve", "-n", "decide", "deploy", "report.publish-3f9a0c1d2e4b5a69",
		"--comment", "ship it")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "approve.txt", out)
	want := []v1alpha1.Approval{{ActionID: "report.publish-3f9a0c1d2e4b5a69", Decision: v1alpha1.DecisionApprove,
		Comment: "ship it", Scope: v1alpha1.ApprovalScopeOnce}}
	if diff := cmp.Diff(want, approvals(t, rr)); diff != "" {
		t.Errorf("spec.approvals after approve (-want +got):\n%s", diff)
	}

	// An action the run does not wait on is refused, naming it and what waits.
	_, _, err = run(t, now, nil, "deny", "-n", "decide", "deploy", "mail.send-0b1c2d3e4f5a6b7c", "--reason", "no")
	wantErr := `action "mail.send-0b1c2d3e4f5a6b7c" is not pending on researchrun decide/deploy ` +
		`(pending: report.publish-3f9a0c1d2e4b5a69); a decision for it would change nothing ` +
		`(pass --force to record it anyway)`
	if err == nil || err.Error() != wantErr {
		t.Errorf("deny of an unknown action: got %v\nwant %s", err, wantErr)
	}
	if got := approvals(t, rr); len(got) != 1 {
		t.Errorf("a refused decision was recorded: %v", got)
	}

	// --force records it anyway; deny's --reason is the comment.
	out, _, err = run(t, now, nil, "deny", "-n", "decide", "deploy", "mail.send-0b1c2d3e4f5a6b7c", "--reason", "not yet",
		"--force")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "deny-force.txt", out)
	want = append(want, v1alpha1.Approval{ActionID: "mail.send-0b1c2d3e4f5a6b7c", Decision: v1alpha1.DecisionDeny,
		Comment: "not yet", Scope: v1alpha1.ApprovalScopeOnce}) // the API's default; a Deny ignores it
	if diff := cmp.Diff(want, approvals(t, rr)); diff != "" {
		t.Errorf("spec.approvals after deny --force (-want +got):\n%s", diff)
	}

	_, _, err = run(t, now, nil, "approve", "-n", "decide", "missing", "x")
	if err == nil || !strings.Contains(err.Error(), `"missing" not found`) {
		t.Errorf("approve on a missing run: %v", err)
	}
}

// approve --standing asks for a standing approval; a call whose arguments
// were too long to be shown in full is approved only with
// --arguments-sha256 naming their hash (issue 25 items 8, 9).
func TestApproveStandingAndTruncatedArguments(t *testing.T) {
	rr := waitingRun(t, "decide-long", "deploy")
	c := cluster(t)
	long := strings.Repeat("0123456789abcdef", 4)
	rr.Status.PendingApprovals = append(rr.Status.PendingApprovals, v1alpha1.ApprovalRequest{
		ActionID: "mail.send-0b1c2d3e4f5a6b7c", Tool: "mail.send", Risk: v1alpha1.RiskHigh, Attempt: 1,
		Arguments: `{"body":"aaaa`, ArgumentsBytes: 20000, ArgumentsSHA256: long, ArgumentsTruncated: true})
	if err := c.Status().Update(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	now := time.Now()

	_, _, err := run(t, now, nil, "approve", "-n", "decide-long", "deploy", "mail.send-0b1c2d3e4f5a6b7c")
	if err == nil || !strings.Contains(err.Error(), "--arguments-sha256") || !strings.Contains(err.Error(), "20000 bytes") {
		t.Errorf("approving truncated arguments without their hash: %v", err)
	}
	_, _, err = run(t, now, nil, "approve", "-n", "decide-long", "deploy", "mail.send-0b1c2d3e4f5a6b7c",
		"--arguments-sha256", strings.Repeat("f", 64))
	if err == nil || !strings.Contains(err.Error(), "other arguments") {
		t.Errorf("approving with another hash: %v", err)
	}
	if got := approvals(t, rr); len(got) != 0 {
		t.Fatalf("a refused approval was recorded: %v", got)
	}

	if _, _, err = run(t, now, nil, "approve", "-n", "decide-long", "deploy", "mail.send-0b1c2d3e4f5a6b7c",
		"--arguments-sha256", long); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, now, nil, "approve", "-n", "decide-long", "deploy", "report.publish-3f9a0c1d2e4b5a69", "--standing")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "standing: every identical call of attempt 1 runs without asking") {
		t.Errorf("approve --standing does not say what it grants:\n%s", out)
	}
	want := []v1alpha1.Approval{
		{ActionID: "mail.send-0b1c2d3e4f5a6b7c", Decision: v1alpha1.DecisionApprove, Scope: v1alpha1.ApprovalScopeOnce, ArgumentsSHA256: long},
		{ActionID: "report.publish-3f9a0c1d2e4b5a69", Decision: v1alpha1.DecisionApprove, Scope: v1alpha1.ApprovalScopeStanding},
	}
	if diff := cmp.Diff(want, approvals(t, rr)); diff != "" {
		t.Errorf("spec.approvals (-want +got):\n%s", diff)
	}
}

func TestApproveWithoutPending(t *testing.T) {
	c := cluster(t)
	createNamespace(t, c, "decide-none")
	rr := newRun("decide-none", "idle", "research", v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10})
	if err := c.Create(context.Background(), rr); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, time.Now(), nil, "approve", "-n", "decide-none", "idle", "report.publish-1")
	if err == nil || !strings.Contains(err.Error(), `action "report.publish-1" is not pending on researchrun `+
		`decide-none/idle (no action waits for a decision)`) {
		t.Errorf("approve with nothing pending: %v", err)
	}
}

func TestCancelAndFinalize(t *testing.T) {
	rr := waitingRun(t, "stop", "survey")
	now := time.Now()
	stopOf := func() v1alpha1.StopRequest {
		var got v1alpha1.ResearchRun
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(rr), &got); err != nil {
			t.Fatal(err)
		}
		return got.Spec.Stop
	}

	out, _, err := run(t, now, nil, "finalize", "-n", "stop", "survey")
	if err != nil {
		t.Fatal(err)
	}
	if got := stopOf(); got != v1alpha1.StopFinalize {
		t.Errorf("spec.stop after finalize: %q", got)
	}
	var all strings.Builder
	all.WriteString("$ kubectl agentrun finalize survey\n" + out)

	out, _, err = run(t, now, nil, "finalize", "-n", "stop", "survey")
	if err != nil {
		t.Fatal(err)
	}
	all.WriteString("$ kubectl agentrun finalize survey\n" + out)

	out, _, err = run(t, now, nil, "cancel", "-n", "stop", "survey")
	if err != nil {
		t.Fatal(err)
	}
	if got := stopOf(); got != v1alpha1.StopCancel {
		t.Errorf("spec.stop after cancel: %q", got)
	}
	all.WriteString("$ kubectl agentrun cancel survey\n" + out)
	golden(t, "stop.txt", all.String())

	// Cancel is final: Finalize would lower it, which the API refuses too.
	_, _, err = run(t, now, nil, "finalize", "-n", "stop", "survey")
	if err == nil || err.Error() != "researchrun stop/survey: spec.stop is Cancel, which cannot be lowered to Finalize" {
		t.Errorf("finalize after cancel: %v", err)
	}

	// A Terminated run is left alone.
	ended := newRun("stop", "ended", "research", v1alpha1.Budget{ModelRequests: 10, ToolCalls: 10})
	if err := k8s.Create(context.Background(), ended); err != nil {
		t.Fatal(err)
	}
	ended.Status = v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseTerminated, Reason: v1alpha1.ReasonCompleted,
		Settlement: v1alpha1.SettlementComplete}
	if err := k8s.Status().Update(context.Background(), ended); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, now, nil, "cancel", "-n", "stop", "ended")
	if err != nil || out != "researchrun stop/ended is already Terminated (Completed): nothing to stop\n" {
		t.Errorf("cancel of a Terminated run: %v %q", err, out)
	}
	var got v1alpha1.ResearchRun
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(ended), &got); err != nil || got.Spec.Stop != "" {
		t.Errorf("a Terminated run was patched: %v %q", err, got.Spec.Stop)
	}
}

// TestLogs reads the attempt pods' logs from a fake kubelet path of an
// API server: the pod of the current (or the given) attempt, container
// agent, following with -f.
func TestLogs(t *testing.T) {
	now := fixtureTeamA(t)
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		if strings.Contains(r.URL.Path, "/pods/gone/") {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, 404)
			return
		}
		_, _ = io.WriteString(w, "step 1: searching\nstep 2: publishing\n")
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := &testFactory{kube: kube}
	out, _, err := run(t, now, f, "logs", "-n", teamA, "compare-licences", "-f")
	if err != nil {
		t.Fatal(err)
	}
	if out != "step 1: searching\nstep 2: publishing\n" {
		t.Errorf("logs: %q", out)
	}
	if _, _, err := run(t, now, f, "logs", "-n", teamA, "compare-licences", "--attempt", "1"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/api/v1/namespaces/team-a/pods/compare-licences-2/log?container=agent&follow=true",
		"/api/v1/namespaces/team-a/pods/compare-licences-1/log?container=agent",
	}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("log requests (-want +got):\n%s", diff)
	}

	_, _, err = run(t, now, f, "logs", "-n", teamA, "survey-vector-dbs")
	if err == nil || err.Error() != "researchrun team-a/survey-vector-dbs has not started an attempt yet (phase Queued)" {
		t.Errorf("logs of a queued run: %v", err)
	}
	_, _, err = run(t, now, f, "logs", "-n", teamA, "compare-licences", "--attempt", "3")
	if err == nil || !strings.Contains(err.Error(), "has no attempt 3 (its attempts are 1 to 2)") {
		t.Errorf("logs of a missing attempt: %v", err)
	}
}
