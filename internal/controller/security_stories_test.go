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

package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/policy"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// What the operator holds against a user with namespace-edit rights (security
// review, issue 25). This suite installs no admission policies: it shows what
// the operator holds by itself, should a write get past them.
var _ = Describe("Security review 25: the operator", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("snapshots the chain from the policy's validated spec, never from a tampered status", func() {
		interceptors := []v1alpha1.Interceptor{
			{Name: "auth", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleAuthentication, Phase: v1alpha1.InterceptorPre,
				Priority: 10, OnError: v1alpha1.PostureDeny, Veto: new(true)},
			{Name: "audit", Class: v1alpha1.ClassObservability, Role: v1alpha1.RoleAudit, Phase: v1alpha1.InterceptorPost,
				Priority: 90, OnError: v1alpha1.PostureAllow},
		}
		Expect(k8sClient.Create(ctx, &v1alpha1.RuntimePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "guarded"},
			Spec:       v1alpha1.RuntimePolicySpec{Interceptors: interceptors},
		})).To(Succeed())
		p := &v1alpha1.RuntimePolicy{}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "guarded"}, p)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionValid)).To(BeTrue())
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		}, timeout, interval).Should(Succeed())

		// Someone with write access to runtimepolicies/status turns the
		// Security check fail-open, and adds an entry of their own; the
		// status still says Valid for the current generation.
		forged := p.DeepCopy()
		forged.Status.ResolvedChain[0].OnError = v1alpha1.PostureAllow
		forged.Status.ResolvedChain = append(forged.Status.ResolvedChain, v1alpha1.ResolvedInterceptor{
			Name: "exfil", Class: v1alpha1.ClassObservability, Phase: v1alpha1.InterceptorPost, Priority: 99, OnError: v1alpha1.PostureAllow})
		Expect(k8sClient.Status().Patch(ctx, forged, client.MergeFrom(p))).To(Succeed())

		Expect(k8sClient.Create(ctx, &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "guarded"},
			Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "guarded"}},
		})).To(Succeed())
		w.run("r", func(r *v1alpha1.ResearchRun) { r.Spec.SessionRef.Name = "guarded" })
		ra := w.attempt("r", 1)
		Expect(ra.Spec.Policy.Name).To(Equal("guarded"))
		Expect(ra.Spec.Policy.ResolvedChain).To(Equal(policy.Resolve(p.Spec.Interceptors)),
			"the snapshot is the spec's resolution, not the status")
		Expect(ra.Spec.Policy.ResolvedChain[0].OnError).To(Equal(v1alpha1.PostureDeny))

		// And the operator puts its report back.
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.ResolvedChain).To(Equal(policy.Resolve(p.Spec.Interceptors)))
		}, timeout, interval).Should(Succeed())
	})

	It("never records a pod it did not create, even one that names the run as its controller", func() {
		// The run waits for its policy, so its attempt's pod can be made first.
		Expect(k8sClient.Create(ctx, &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "later"},
			Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "later"}},
		})).To(Succeed())
		run := w.run("r", func(r *v1alpha1.ResearchRun) { r.Spec.SessionRef.Name = "later" })
		foreign := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: attemptName("r", 1), Labels: map[string]string{
				runpod.LabelManagedBy: runpod.ManagedBy, runpod.LabelName: runpod.AppName,
				v1alpha1.LabelRun: "r", v1alpha1.LabelAttempt: "1"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ResearchRun",
					Name: run.Name, UID: run.UID, Controller: new(true)}},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "mallory/agent"}}},
		}
		Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
		Expect(k8sClient.Create(ctx, &v1alpha1.RuntimePolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "later"},
		})).To(Succeed())

		// spec.podUID is set once (a CRD rule): once it names another pod,
		// the foreign one was never recorded.
		ra := &v1alpha1.RunAttempt{}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName("r", 1)}, ra)).To(Succeed())
			g.Expect(ra.Spec.PodUID).NotTo(BeEmpty())
		}, timeout, interval).Should(Succeed())
		Expect(ra.Spec.PodUID).NotTo(Equal(string(foreign.UID)), "the pre-created pod was adopted as the attempt's")
		pod := w.pod("r", 1)
		Expect(string(pod.UID)).To(Equal(ra.Spec.PodUID))
		Expect(pod.Spec.Containers[0].Image).To(Equal("research-agent"), "the attempt runs the run's template")
		Expect(w.runEvents("r", v1alpha1.EventReasonForeignPodReplaced)).To(ContainElement(
			HaveField("Note", ContainSubstring("the operator did not create it"))))
	})

	It("restores the attempt egress NetworkPolicy before each attempt's pod and while attempts run, and names a policy that widens it", func() {
		want := AttemptEgressPolicy("agentrun-system")
		key := types.NamespacedName{Namespace: w.ns, Name: want.Name}
		np := &networkingv1.NetworkPolicy{}

		// A first run sets the namespace up, and ends: no attempt pod is left.
		w.run("first", nil)
		w.pod("first", 1)
		Eventually(func() error { return k8sClient.Get(ctx, key, np) }, timeout, interval).Should(Succeed())
		w.stopRun("first", v1alpha1.StopCancel)
		w.eventually("first", v1alpha1.PhaseTerminated, "")
		Eventually(func() bool { return w.podGone("first", 1) }, timeout, interval).Should(BeTrue())

		// A namespace editor deletes the policy; the next attempt's pod is
		// not created before it is back.
		Expect(k8sClient.Delete(ctx, np)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &networkingv1.NetworkPolicy{})) },
			timeout, interval).Should(BeTrue())
		w.run("second", nil)
		pod := w.pod("second", 1)
		Expect(k8sClient.Get(ctx, key, np)).To(Succeed(), "the attempt's pod exists without its egress policy")
		Expect(olderRV(np.ResourceVersion, pod.ResourceVersion)).To(BeTrue(),
			"the policy (rv %s) was back before the pod was created (rv %s)", np.ResourceVersion, pod.ResourceVersion)
		Expect(equality.Semantic.DeepEqual(np.Spec, want.Spec)).To(BeTrue())

		// Widened while the attempt runs: restored by the watch.
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
		Expect(k8sClient.Update(ctx, np)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, key, np)).To(Succeed())
			g.Expect(equality.Semantic.DeepEqual(np.Spec, want.Spec)).To(BeTrue(), "egress: %+v", np.Spec.Egress)
		}, timeout, interval).Should(Succeed())

		// Deleted while the attempt runs: back by the watch.
		Expect(k8sClient.Delete(ctx, np)).To(Succeed())
		Eventually(func(g Gomega) {
			fresh := &networkingv1.NetworkPolicy{}
			g.Expect(k8sClient.Get(ctx, key, fresh)).To(Succeed())
			g.Expect(fresh.UID).NotTo(Equal(np.UID))
		}, timeout, interval).Should(Succeed())

		// Another policy that lets every pod of the namespace out is named
		// on the run.
		egress := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		Expect(k8sClient.Create(ctx, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "allow-all-egress"},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: egress, Egress: []networkingv1.NetworkPolicyEgressRule{{}}},
		})).To(Succeed())
		Eventually(func() []string {
			var notes []string
			for _, e := range w.runEvents("second", v1alpha1.EventReasonExtraEgressPolicy) {
				notes = append(notes, e.Note)
			}
			return notes
		}, timeout, interval).Should(ContainElement(And(ContainSubstring("NetworkPolicy allow-all-egress"),
			ContainSubstring("second-1"), ContainSubstring("NetworkPolicies add up"))))
	})
})
