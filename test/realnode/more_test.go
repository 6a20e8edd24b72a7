//go:build realnode

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

package realnode

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// budgetScript writes notes until the working budget is spent, then publishes from the reserve.
const budgetScript = `plan: [Alpha, Beta]
turns:
- tools: [{name: notes.write, args: {section: Alpha, text: "a1"}}]
- tools: [{name: notes.write, args: {section: Beta, text: "b1"}}]
- tools: [{name: notes.write, args: {section: Alpha, text: "a2"}}]
  repeat: 20
finalize:
- tools: [{name: report.publish, args: {section: Alpha, content: "Alpha, from the reserve."}}]
`

// A run whose working budget runs out finalizes from its output reserve on the real node: the
// publication made from the reserve (approved with kubectl agentrun) lands in the report, and
// the run ends BudgetExhausted having spent its whole budget, no more.
func TestBudgetRunFinalizesFromItsReserve(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t, g, "budget")
	applySamples(g, ns)
	ctx := context.Background()
	g.Expect(cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "costly"},
		Data: map[string]string{"script.yaml": budgetScript}})).To(Succeed())
	g.Expect(cl.Create(ctx, &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "costly"},
		Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "default"}}})).To(Succeed())
	run := quickRun(ns, "costly")
	run.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name = "costly"
	run.Spec.Budget = v1alpha1.Budget{ModelRequests: 5, ToolCalls: 20,
		OutputReserve: v1alpha1.OutputReserve{ModelRequests: 1, ToolCalls: 1}}
	g.Expect(cl.Create(ctx, run)).To(Succeed())

	done := approveAll(g, ns, "costly")
	g.Expect(done.Status.Reason).To(Equal(v1alpha1.ReasonBudgetExhausted), "message: %s", done.Status.Message)
	g.Expect(done.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(5), "the working budget and the reserve, no more")
	report := &corev1.ConfigMap{}
	g.Expect(cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "costly-report"}, report)).To(Succeed())
	g.Expect(strings.Join(mapValues(report.Data), "\n")).To(ContainSubstring("Alpha, from the reserve."))
}

// An attempt pod deleted while its run waits on an approval is recovered: the run records the
// lost attempt, starts a second one whose pod runs on the node, and goes on to its end. (The
// scripted agent starts its script again in the new attempt, so the run may end on a gate such
// as NoProgress rather than Completed: the story is the recovery, not the script.)
func TestDeletedAttemptPodIsRecovered(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t, g, "recover")
	applySamples(g, ns)
	g.Eventually(func(g Gomega) { g.Expect(awaiting(g, ns, sampleRun)).NotTo(BeEmpty()) }, timeout, interval).Should(Succeed())
	first := runningPod(g, ns, sampleRun)
	g.Expect(cl.Delete(context.Background(), first)).To(Succeed())

	g.Eventually(func(g Gomega) {
		second := runningPod(g, ns, sampleRun)
		g.Expect(second.Name).NotTo(Equal(first.Name))
		g.Expect(second.Spec.NodeName).To(Equal("realnode"))
	}, timeout, interval).Should(Succeed())
	run := approveAll(g, ns, sampleRun)
	g.Expect(run.Status.Ledger).To(HaveLen(2), "two attempts: the deleted one and its replacement")
	g.Expect(meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionRecovering)).NotTo(BeNil())
	t.Logf("recovered run ended %s/%s: %s", run.Status.Reason, run.Status.Settlement, run.Status.Message)
}

// `kubectl agentrun events` streams a run from agentrun-stream, reached as the plugin's hint
// says: kubectl port-forward (the kubelet's streaming) and a token for the stream's audience.
func TestEventsStreamARun(t *testing.T) {
	g := NewWithT(t)
	ns := namespace(t, g, "events")
	applySamples(g, ns)
	for _, args := range [][]string{
		{"-n", ns, "create", "serviceaccount", "watcher"},
		{"-n", ns, "create", "role", "watch-runs", "--verb=get,list,watch", "--resource=researchruns.agentrun.dev"},
		{"-n", ns, "create", "rolebinding", "watcher", "--role=watch-runs", "--serviceaccount=" + ns + ":watcher"},
	} {
		out, err := kubectl(args...)
		g.Expect(err).NotTo(HaveOccurred(), out)
	}
	pf := exec.Command(filepath.Join(toolchainDir(), "kubectl"), "--kubeconfig", kubeconfig(),
		"-n", operatorNamespace, "port-forward", "svc/agentrun-stream", "18443:443")
	g.Expect(pf.Start()).To(Succeed())
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })

	// Followed while the run is young (retried until the port-forward answers), the stream
	// goes on to the run's end while its publications are approved.
	followed := make(chan string, 1)
	go func() {
		var out string
		for range 60 {
			var err error
			out, err = kubectl("agentrun", "events", "-n", ns, sampleRun, "--server", "https://localhost:18443",
				"--insecure", "--service-account", "watcher", "--follow")
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		followed <- out
	}()
	approveAll(g, ns, sampleRun)
	var out string
	g.Eventually(followed, timeout).Should(Receive(&out))
	g.Expect(out).To(ContainSubstring("RUN_STARTED"))
	g.Expect(out).To(ContainSubstring("TOOL_CALL_RESULT"))
	g.Expect(out).To(ContainSubstring("RUN_FINISHED"))
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
