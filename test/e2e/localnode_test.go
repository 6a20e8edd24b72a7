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
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The local node on its own: plain pods (not attempt pods) whose container is
// /bin/sh, so each behaviour of a kubelet the stack relies on is checked
// directly.
var _ = Describe("The local node", func() {
	var ns string
	BeforeEach(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"}}
		Expect(st.Client.Create(ctx, n)).To(Succeed())
		ns = n.Name
		Expect(st.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})).
			To(Or(Succeed(), WithTransform(apierrors.IsAlreadyExists, BeTrue())))
	})
	shellPod := func(name, script string, grace int64) *corev1.Pod {
		GinkgoHelper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				ServiceAccountName:            "default",
				TerminationGracePeriodSeconds: new(grace),
				Containers: []corev1.Container{{
					Name: "main", Image: imageShell, Command: []string{"sh", "-c", script},
					Env: []corev1.EnvVar{
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
						{Name: "GREETING", Value: "hello $(POD_NAME)"},
					},
				}},
			},
		}
		Expect(st.Client.Create(ctx, pod)).To(Succeed())
		return pod
	}

	It("binds a pending pod, runs it as a process with downward-API env, a pod-bound token and kubectl logs", func() {
		pod := shellPod("hello", `echo "$GREETING uid=$POD_UID"; test -s "$AGENTRUN_KUBECONFIG" && echo kubeconfig-ok`, 30)
		done := podDone(ns, "hello")
		Expect(done.Spec.NodeName).To(Equal("agentrun-local"), "the binder assigned the pod")
		Expect(done.Status.Phase).To(Equal(corev1.PodSucceeded))
		Expect(done.Status.ContainerStatuses).To(HaveLen(1))
		Expect(done.Status.ContainerStatuses[0].State.Terminated).NotTo(BeNil())
		Expect(done.Status.ContainerStatuses[0].State.Terminated.ExitCode).To(BeZero())

		logs, err := kubectl("logs", "-n", ns, "hello")
		Expect(err).NotTo(HaveOccurred(), logs)
		Expect(logs).To(ContainSubstring("hello hello uid=" + string(pod.UID)))
		Expect(logs).To(ContainSubstring("kubeconfig-ok"))
		tail, err := kubectl("logs", "-n", ns, "hello", "--tail=1")
		Expect(err).NotTo(HaveOccurred(), tail)
		Expect(tail).To(Equal("kubeconfig-ok"))
	})

	It("reports a non-zero exit as a Failed pod with the exit code", func() {
		shellPod("fails", "echo failing; exit 3", 30)
		done := podDone(ns, "fails")
		Expect(done.Status.Phase).To(Equal(corev1.PodFailed))
		term := done.Status.ContainerStatuses[0].State.Terminated
		Expect(term).NotTo(BeNil())
		Expect(term.ExitCode).To(BeEquivalentTo(3))
		Expect(term.Reason).To(Equal("Error"))
	})

	It("sends SIGTERM on deletion, SIGKILL after the grace period, then removes the pod", func() {
		// The process ignores SIGTERM (it logs it), so only SIGKILL ends it.
		shellPod("stubborn", `trap 'echo got SIGTERM' TERM; echo started; while :; do sleep 0.2; done`, 2)
		var pid int
		Eventually(func() int {
			pid = st.Node.Processes()[ns+"/stubborn/main"]
			return pid
		}, timeout, interval).ShouldNot(BeZero())
		Eventually(func() (string, error) { return kubectl("logs", "-n", ns, "stubborn") }, timeout, interval).
			Should(ContainSubstring("started"))
		logFile := filepath.Join(st.Node.PodDir(ns, "stubborn"), "main.log")

		deleted := time.Now()
		Expect(st.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stubborn"}})).To(Succeed())
		Eventually(func() bool { return processAlive(pid) }, 10*time.Second, interval).Should(BeFalse())
		Expect(time.Since(deleted)).To(BeNumerically(">=", 1500*time.Millisecond), "killed before the grace period")
		Eventually(func() bool {
			err := st.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "stubborn"}, &corev1.Pod{})
			return apierrors.IsNotFound(err)
		}, timeout, interval).Should(BeTrue(), "the pod is removed once its process is gone")
		data, err := os.ReadFile(logFile)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(ContainSubstring("got SIGTERM"))
	})

	It("runs an attempt pod that holds only a gateway token bound to it: the gateway accepts its facts and publishes its report", func() {
		w := newWorld(nil)
		w.run("mini", imageMiniAgent, nil, nil)
		run := w.terminated("mini", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(run.Status.Attempt).To(BeEquivalentTo(1))
		Expect(w.phaseSequence("mini")).To(Equal([]v1.Phase{v1.PhaseRunning, v1.PhaseFinalizing, v1.PhaseTerminated}))
		Expect(w.report("mini")).NotTo(BeNil())
		Expect(w.report("mini").Labels).To(HaveKeyWithValue(v1.LabelRun, "mini"))

		By("the attempt names the pod whose token the gateway mapped to it, and the gateway counted its model request")
		list := &v1.RunAttemptList{}
		Expect(st.Client.List(ctx, list, client.InNamespace(w.ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		Expect(list.Items[0].Spec.PodUID).NotTo(BeEmpty())
		Expect(list.Items[0].Status.Usage.ModelRequests).To(BeEquivalentTo(1))
		Expect(list.Items[0].Status.Usage.Tokens).To(BeNumerically(">", 0), "tokens are what the upstream reported")
		Expect(run.Status.Budget.Used.ModelRequests).To(BeEquivalentTo(1))

		By("the pod held no API-server token (the miniagent refuses to run with one)")
		if pod := (&corev1.Pod{}); st.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "mini-1"}, pod) == nil {
			Expect(pod.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
		}
	})
})
