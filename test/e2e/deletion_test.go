//go:build e2e

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

package e2e

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Deletion as on a cluster: the stack runs kube-controller-manager's
// garbage collector and namespace controller, so a deleted ResearchRun's
// RunAttempts and pods go with it (the local node stops the pod's
// processes as a kubelet does), and a deleted namespace is emptied and
// removed.
var _ = Describe("Deletion (kube-controller-manager's garbage collector and namespace controller)", func() {
	// stubborn is an attempt pod's agent that logs SIGTERM and exits on it;
	// it never talks to the gateway, so the run stays Running until
	// deleted.
	const stubborn = `trap 'echo got SIGTERM; exit 143' TERM; echo started; while :; do sleep 0.2; done`
	shellRun := func(w *world, name string) {
		GinkgoHelper()
		w.run(name, imageShell, nil, func(r *v1.ResearchRun) {
			r.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", stubborn}
		})
	}
	// running waits for the run's first attempt's process to have started
	// and returns its pid and its log file.
	running := func(w *world, name string) (int, string) {
		GinkgoHelper()
		w.eventually(name, v1.PhaseRunning, "")
		pid := w.pid(name, 1)
		pod := attemptName(name, 1)
		logs := filepath.Join(st.Node.PodDir(w.ns, pod), "agent.log")
		Eventually(func() (string, error) {
			data, err := os.ReadFile(logs)
			return string(data), err
		}, timeout, interval).Should(ContainSubstring("started"))
		return pid, logs
	}
	gone := func(obj client.Object, key types.NamespacedName, within time.Duration, what string) {
		GinkgoHelper()
		Eventually(func() bool {
			return apierrors.IsNotFound(st.Client.Get(ctx, key, obj))
		}, within, interval).Should(BeTrue(), "%s %s is still there after %s", what, key, within)
	}

	It("deletes a root's tree of child runs with it: the garbage collector follows the children's owner references", func() {
		w := newWorld(nil)
		shellRun(w, "root")
		running(w, "root")
		root := &v1.ResearchRun{}
		Expect(st.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "root"}, root)).To(Succeed())
		child := &v1.ResearchRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "root-a",
				Labels: map[string]string{v1.LabelParent: "root", v1.LabelRoot: "root"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "ResearchRun",
					Name: "root", UID: root.UID, Controller: new(true)}}},
			Spec: *root.Spec.DeepCopy(),
		}
		child.Spec.Parent = &v1.ParentRef{Name: "root", UID: string(root.UID), Attempt: 1, Root: "root", Depth: 1}
		child.Spec.Budget = v1.Budget{ModelRequests: 4, ToolCalls: 2, Deadline: &metav1.Duration{Duration: 5 * time.Minute}}

		By("only agentrun-gateway may create a child (admission policy researchrun-parent-authority)")
		err := st.Client.Create(ctx, child.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("only agentrun-gateway creates child runs"))
		asGateway := rest.CopyConfig(st.Admin)
		asGateway.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:agentrun-system:agentrun-gateway",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:agentrun-system", "system:authenticated"}}
		gw, err := client.New(asGateway, client.Options{Scheme: st.Client.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		Expect(gw.Create(ctx, child)).To(Succeed())

		By("the child runs in its parent's session slot, alongside it")
		childPid, _ := running(w, "root-a")

		By("deleting the root deletes the tree")
		Expect(st.Client.Delete(ctx, root)).To(Succeed())
		gone(&v1.ResearchRun{}, types.NamespacedName{Namespace: w.ns, Name: "root-a"}, timeout, "child run")
		gone(&corev1.Pod{}, types.NamespacedName{Namespace: w.ns, Name: attemptName("root-a", 1)}, timeout, "child's pod")
		Eventually(func() bool { return processAlive(childPid) }, timeout, interval).Should(BeFalse(),
			"the child's agent process %d still runs", childPid)
	})

	It("stops a deleted run's pod with SIGTERM, removes its RunAttempt and pod, and starts the session's next run", func() {
		w := newWorld(nil)
		shellRun(w, "doomed")
		pid, logs := running(w, "doomed")
		w.script("script", scriptComplete)
		w.run("next", imageResearchAgent, agentArgs("script"), nil)
		w.eventually("next", v1.PhaseQueued, "")

		By("deleting the running run as a user would (kubectl delete: background propagation)")
		deleted := time.Now()
		Expect(st.Client.Delete(ctx, w.get("doomed"))).To(Succeed())
		gone(&v1.ResearchRun{}, types.NamespacedName{Namespace: w.ns, Name: "doomed"}, timeout, "ResearchRun")

		By("the garbage collector deletes its RunAttempt and its pod; the node stops the process with SIGTERM")
		gone(&v1.RunAttempt{}, types.NamespacedName{Namespace: w.ns, Name: attemptName("doomed", 1)}, timeout, "RunAttempt")
		Eventually(func() bool { return processAlive(pid) }, timeout, interval).Should(BeFalse(), "the agent process outlived its run")
		gone(&corev1.Pod{}, types.NamespacedName{Namespace: w.ns, Name: attemptName("doomed", 1)}, timeout, "Pod")
		_, _ = GinkgoWriter.Write([]byte("run, attempt, process and pod gone " + time.Since(deleted).Round(100*time.Millisecond).String() +
			" after the delete\n"))
		data, err := os.ReadFile(logs)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(ContainSubstring("got SIGTERM"), "the process was stopped with SIGTERM, not killed")

		By("the session's next run starts and completes")
		run := w.terminated("next", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(run.Status.Attempt).To(BeEquivalentTo(1))
	})

	It("empties a deleted namespace and removes it (it does not stay Terminating)", func() {
		w := newWorld(nil)
		shellRun(w, "busy")
		pid, logs := running(w, "busy")

		By("deleting the namespace with a running run, its session, policy, attempt and pod in it")
		deleted := time.Now()
		Expect(st.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}})).To(Succeed())
		gone(&corev1.Namespace{}, types.NamespacedName{Name: w.ns}, 2*timeout, "Namespace")
		_, _ = GinkgoWriter.Write([]byte("namespace gone " + time.Since(deleted).Round(100*time.Millisecond).String() +
			" after the delete\n"))
		Expect(processAlive(pid)).To(BeFalse(), "the agent process outlived its namespace")
		data, err := os.ReadFile(logs)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(ContainSubstring("got SIGTERM"))
	})
})
