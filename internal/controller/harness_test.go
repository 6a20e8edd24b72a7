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
	"fmt"
	"slices"
	"strconv"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// world is one test's namespace with a policy and a session, plus a watch
// that records every phase each run passes through.
type world struct {
	ns      string
	session string

	mu     sync.Mutex
	phases map[string][]v1alpha1.Phase
	stop   func()

	// current phase and session of every run, as the watch saw them, and
	// every moment two runs of one session were active together.
	current   map[string]v1alpha1.Phase
	sessionOf map[string]string
	overlaps  []string
}

func newWorld() *world {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "story-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	w := &world{ns: ns.Name, session: "s", phases: map[string][]v1alpha1.Phase{},
		current: map[string]v1alpha1.Phase{}, sessionOf: map[string]string{}}

	Expect(k8sClient.Create(ctx, &v1alpha1.RuntimePolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "p"},
		Spec: v1alpha1.RuntimePolicySpec{
			Tools: []v1alpha1.Tool{
				{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
				{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
			},
		},
	})).To(Succeed())
	w.newSession(w.session)

	watcher, err := k8sClient.Watch(ctx, &v1alpha1.ResearchRunList{}, client.InNamespace(w.ns))
	Expect(err).NotTo(HaveOccurred())
	w.stop = watcher.Stop
	go func() {
		defer GinkgoRecover()
		for ev := range watcher.ResultChan() {
			run, ok := ev.Object.(*v1alpha1.ResearchRun)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				w.mu.Lock()
				delete(w.current, run.Name)
				w.mu.Unlock()
				continue
			}
			if (ev.Type != watch.Added && ev.Type != watch.Modified) || run.Status.Phase == "" {
				continue
			}
			w.mu.Lock()
			seq := w.phases[run.Name]
			if len(seq) == 0 || seq[len(seq)-1] != run.Status.Phase {
				w.phases[run.Name] = append(seq, run.Status.Phase)
			}
			w.current[run.Name] = run.Status.Phase
			w.sessionOf[run.Name] = run.Spec.SessionRef.Name
			if run.Spec.Parent != nil {
				w.sessionOf[run.Name] = "" // a child runs in its parent's slot
			}
			var active []string
			for name, phase := range w.current {
				if phase.IsActive() && w.sessionOf[name] == run.Spec.SessionRef.Name {
					active = append(active, name)
				}
			}
			if len(active) > 1 {
				slices.Sort(active)
				w.overlaps = append(w.overlaps, fmt.Sprintf("session %s: %v active at once", run.Spec.SessionRef.Name, active))
			}
			w.mu.Unlock()
		}
	}()
	DeferCleanup(func() {
		w.stop()
		w.mu.Lock()
		defer w.mu.Unlock()
		Expect(w.overlaps).To(BeEmpty(), "two runs of one session were active at the same time")
	})
	return w
}

func (w *world) newSession(name string) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec:       v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"}},
	})).To(Succeed())
}

// phaseSequence returns the phases the watch saw for run, in order, without
// the Pending/Queued prefix.
func (w *world) phaseSequence(run string) []v1alpha1.Phase {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []v1alpha1.Phase
	for _, p := range w.phases[run] {
		if len(out) == 0 && (p == v1alpha1.PhasePending || p == v1alpha1.PhaseQueued) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// run creates a ResearchRun with a small budget; mutate adjusts the spec.
func (w *world) run(name string, mutate func(*v1alpha1.ResearchRun)) *v1alpha1.ResearchRun {
	GinkgoHelper()
	run := &v1alpha1.ResearchRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: v1alpha1.ResearchRunSpec{
			SessionRef: v1alpha1.LocalObjectReference{Name: w.session},
			Goal:       "survey the field",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "agent", Image: "research-agent"}},
			}},
			Budget: v1alpha1.Budget{
				ModelRequests: 10, ToolCalls: 10,
				OutputReserve: v1alpha1.OutputReserve{ModelRequests: 2, ToolCalls: 2},
			},
			Recovery: v1alpha1.Recovery{Backoff: &metav1.Duration{}},
		},
	}
	if mutate != nil {
		mutate(run)
	}
	Expect(k8sClient.Create(ctx, run)).To(Succeed())
	return run
}

func (w *world) get(name string) *v1alpha1.ResearchRun {
	GinkgoHelper()
	run := &v1alpha1.ResearchRun{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, run)).To(Succeed())
	return run
}

// eventually waits until run is in phase (and, if given, has reason).
func (w *world) eventually(name string, phase v1alpha1.Phase, reason v1alpha1.Reason) *v1alpha1.ResearchRun {
	GinkgoHelper()
	run := &v1alpha1.ResearchRun{}
	Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, run)).To(Succeed())
		g.Expect(run.Status.Phase).To(Equal(phase), "message: %s", run.Status.Message)
		if reason != "" {
			g.Expect(run.Status.Reason).To(Equal(reason), "message: %s", run.Status.Message)
		}
	}, timeout, interval).Should(Succeed())
	return run
}

func attemptName(run string, n int) string { return fmt.Sprintf("%s-%d", run, n) }

// pod waits for attempt n's pod to exist.
func (w *world) pod(run string, n int) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{}
	Eventually(func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName(run, n)}, pod)
	}, timeout, interval).Should(Succeed())
	return pod
}

// attempt waits for RunAttempt n to exist and returns it.
func (w *world) attempt(run string, n int) *v1alpha1.RunAttempt {
	GinkgoHelper()
	ra := &v1alpha1.RunAttempt{}
	Eventually(func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName(run, n)}, ra)
	}, timeout, interval).Should(Succeed())
	return ra
}

// kubelet sets attempt n's pod phase, as a kubelet would.
func (w *world) kubelet(run string, n int, phase corev1.PodPhase) {
	GinkgoHelper()
	Eventually(func() error {
		pod := w.pod(run, n)
		pod.Status.Phase = phase
		if pod.Status.StartTime == nil {
			pod.Status.StartTime = new(metav1.Now())
		}
		if phase == corev1.PodFailed {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}}}
		}
		return k8sClient.Status().Update(ctx, pod)
	}, timeout, interval).Should(Succeed())
}

// exited has attempt n's pod exit 0 of its own accord now, as a kubelet
// reports it: Succeeded, its container terminated with a finishedAt.
func (w *world) exited(run string, n int) {
	GinkgoHelper()
	Eventually(func() error {
		pod := w.pod(run, n)
		now := metav1.Now()
		pod.Status.Phase = corev1.PodSucceeded
		if pod.Status.StartTime == nil {
			pod.Status.StartTime = &now
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}}}
		return k8sClient.Status().Update(ctx, pod)
	}, timeout, interval).Should(Succeed())
}

// start waits for attempt n's pod and marks it Running.
func (w *world) start(run string, n int) {
	GinkgoHelper()
	w.kubelet(run, n, corev1.PodRunning)
	w.eventually(run, v1alpha1.PhaseRunning, "")
}

// agent writes attempt n's status as the agent would (retrying conflicts).
func (w *world) agent(run string, n int, mutate func(*v1alpha1.RunAttemptStatus)) {
	GinkgoHelper()
	Eventually(func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ra := &v1alpha1.RunAttempt{}
			if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName(run, n)}, ra); err != nil {
				return err
			}
			mutate(&ra.Status)
			return k8sClient.Status().Update(ctx, ra)
		})
	}, timeout, interval).Should(Succeed())
}

// finish reports finish, a settled publication and the pod's exit.
func (w *world) finish(run string, n int, settlement v1alpha1.Settlement) {
	GinkgoHelper()
	w.agent(run, n, func(s *v1alpha1.RunAttemptStatus) {
		s.FinishProposed = true
	})
	w.eventually(run, v1alpha1.PhaseFinalizing, v1alpha1.ReasonCompleted)
	w.settle(run, n, settlement)
}

// settle persists the publication's settlement and lets the pod exit.
func (w *world) settle(run string, n int, settlement v1alpha1.Settlement) {
	GinkgoHelper()
	w.agent(run, n, func(s *v1alpha1.RunAttemptStatus) {
		s.Publication = v1alpha1.Publication{BlocksPlanned: 3, BlocksCommitted: 3, Settlement: settlement, Settled: true}
		if settlement == v1alpha1.SettlementPartial {
			s.Publication.BlocksCommitted = 1
		}
	})
	// As a kubelet reports it (container finishedAt), so the operator's fact
	// grace covers a RunAttempt cache that has not shown the settlement yet.
	w.exited(run, n)
}

// stopRun sets spec.stop with a merge patch, as kubectl patch would.
func (w *world) stopRun(name string, stop v1alpha1.StopRequest) {
	GinkgoHelper()
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	patch := []byte(fmt.Sprintf(`{"spec":{"stop":%q}}`, stop))
	Expect(k8sClient.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
}

// approve appends an approval with a JSON patch, as kubectl patch would.
func (w *world) approve(name string, a v1alpha1.Approval) {
	GinkgoHelper()
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	if len(w.get(name).Spec.Approvals) == 0 {
		patch := []byte(fmt.Sprintf(`{"spec":{"approvals":[{"actionID":%q,"decision":%q}]}}`, a.ActionID, a.Decision))
		Expect(k8sClient.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
		return
	}
	patch := []byte(fmt.Sprintf(`[{"op":"add","path":"/spec/approvals/-","value":{"actionID":%q,"decision":%q}}]`, a.ActionID, a.Decision))
	Expect(k8sClient.Patch(ctx, run, client.RawPatch(types.JSONPatchType, patch))).To(Succeed())
}

// attempts lists the RunAttempt numbers of run.
func (w *world) attempts(run string) []int {
	GinkgoHelper()
	list := &v1alpha1.RunAttemptList{}
	Expect(k8sClient.List(ctx, list, client.InNamespace(w.ns), client.MatchingLabels{v1alpha1.LabelRun: run})).To(Succeed())
	var out []int
	for _, ra := range list.Items {
		n, err := strconv.Atoi(ra.Labels[v1alpha1.LabelAttempt])
		Expect(err).NotTo(HaveOccurred())
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// podGone reports whether attempt n's pod no longer exists.
func (w *world) podGone(run string, n int) bool {
	err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: attemptName(run, n)}, &corev1.Pod{})
	return apierrors.IsNotFound(err)
}
