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
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Every story here runs with 4 reconcile workers and a client that fails every
// third status write with a conflict (suite_test.go); the world's watch fails
// the test if two runs of one session are ever active at the same time.
var _ = Describe("Sessions", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	session := func(name string) *v1alpha1.Session {
		GinkgoHelper()
		s := &v1alpha1.Session{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, s)).To(Succeed())
		return s
	}

	It("runs three runs of one session strictly one after another, in creation order, beside another session", func() {
		// FIFO is by creation time with the name breaking ties (timestamps
		// have one-second resolution), so the names sort in creation order.
		for _, name := range []string{"r1", "r2", "r3"} {
			w.run(name, nil)
		}
		w.newSession("other")
		w.session = "other"
		w.run("beside", nil)
		w.session = "s"

		w.eventually("r1", v1alpha1.PhaseRunning, "")
		w.eventually("beside", v1alpha1.PhaseRunning, "")
		Eventually(func() int32 { return w.get("r2").Status.QueuePosition }, timeout, interval).Should(Equal(int32(1)))
		Eventually(func() int32 { return w.get("r3").Status.QueuePosition }, timeout, interval).Should(Equal(int32(2)))
		Eventually(func(g Gomega) {
			s := session("s")
			g.Expect(s.Status.ActiveRun).To(Equal("r1"))
			g.Expect(s.Status.QueuedRuns).To(Equal([]string{"r2", "r3"}))
			g.Expect(s.Status.QueuedCount).To(Equal(int32(2)))
		}, timeout, interval).Should(Succeed())

		for i, name := range []string{"r1", "r2", "r3"} {
			w.start(name, 1)
			Expect(w.get(name).Status.Phase).To(Equal(v1alpha1.PhaseRunning))
			if i < 2 {
				Expect(w.phaseSequence([]string{"r1", "r2", "r3"}[i+1])).To(BeEmpty(), "the next run must not start before this one ended")
			}
			w.finish(name, 1, v1alpha1.SettlementComplete)
			w.eventually(name, v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		}
		w.start("beside", 1)
		w.finish("beside", 1, v1alpha1.SettlementComplete)
		Eventually(func(g Gomega) {
			s := session("s")
			g.Expect(s.Status.ActiveRun).To(BeEmpty())
			g.Expect(s.Status.Runs.Terminated).To(Equal(int32(3)))
		}, timeout, interval).Should(Succeed())
	})

	It("ends a run beyond the queue limit at once, and a run that waited too long, leaving the active run alone", func() {
		tight := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "tight"},
			Spec: v1alpha1.SessionSpec{PolicyRef: v1alpha1.LocalObjectReference{Name: "p"},
				Queue: v1alpha1.SessionQueue{Limit: ptr.To[int32](2), Timeout: &metav1.Duration{Duration: 3 * time.Second}}},
		}
		Expect(k8sClient.Create(ctx, tight)).To(Succeed())
		w.session = "tight"
		w.run("a", nil) // names sort in creation order: FIFO breaks same-second ties by name
		w.eventually("a", v1alpha1.PhaseRunning, "")
		w.run("b", nil)
		w.eventually("b", v1alpha1.PhaseQueued, "")
		w.run("c", nil)
		w.eventually("c", v1alpha1.PhaseQueued, "")
		w.run("d", nil)
		d := w.eventually("d", v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueFull)
		Expect(d.Status.Message).To(ContainSubstring("3"), "the message names the position")
		Expect(d.Status.Message).To(ContainSubstring("2"), "the message names the limit")
		Expect(w.phaseSequence("d")).To(Equal([]v1alpha1.Phase{v1alpha1.PhaseTerminated}))

		b := w.eventually("b", v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueTimeout)
		Expect(b.Status.Message).To(ContainSubstring("3s"))
		w.eventually("c", v1alpha1.PhaseTerminated, v1alpha1.ReasonQueueTimeout)
		Expect(w.get("a").Status.Phase).To(Equal(v1alpha1.PhaseRunning))
	})

	It("never lets a stuck run hold the session past its own deadline", func() {
		w.run("r1-stuck", func(r *v1alpha1.ResearchRun) {
			r.Spec.Budget.Deadline = &metav1.Duration{Duration: 2 * time.Second}
			r.Spec.Budget.FinalizationGrace = &metav1.Duration{Duration: time.Second}
		})
		w.eventually("r1-stuck", v1alpha1.PhaseRunning, "")
		w.run("r2-next", nil)
		// The pod never gets going and the agent never reports anything.
		w.pod("r1-stuck", 1)
		w.eventually("r2-next", v1alpha1.PhaseQueued, "")
		stuck := w.eventually("r1-stuck", v1alpha1.PhaseTerminated, v1alpha1.ReasonDeadlineExceeded)
		Expect(stuck.Status.CompletionTime.Sub(stuck.Status.StartTime.Time)).To(BeNumerically("<", 10*time.Second))
		w.eventually("r2-next", v1alpha1.PhaseRunning, "")
	})

	It("releases the session when its active run is deleted", func() {
		w.run("r1-gone", nil)
		w.run("r2-after", nil)
		w.eventually("r1-gone", v1alpha1.PhaseRunning, "")
		w.eventually("r2-after", v1alpha1.PhaseQueued, "")
		Expect(k8sClient.Delete(ctx, w.get("r1-gone"))).To(Succeed())
		w.eventually("r2-after", v1alpha1.PhaseRunning, "")
	})

	It("ends the runs of a deleted session as Cancelled, saying why", func() {
		w.run("active", nil)
		w.eventually("active", v1alpha1.PhaseRunning, "")
		w.run("waiting", nil)
		w.start("active", 1)
		w.eventually("waiting", v1alpha1.PhaseQueued, "")
		Expect(k8sClient.Delete(ctx, session("s"))).To(Succeed())
		for _, name := range []string{"active", "waiting"} {
			run := w.eventually(name, v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled)
			Expect(run.Status.Message).To(ContainSubstring("session s was deleted"))
		}
		Expect(w.podGone("active", 1)).To(BeTrue())
		Eventually(func() bool {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: "s"}, &v1alpha1.Session{})
			return err != nil
		}, timeout, interval).Should(BeTrue(), "the finalizer lets the session go once its runs ended")
	})

	It("ends a run that waits for a missing session when it is cancelled", func() {
		w.session = "not-yet"
		w.run("orphan", nil)
		Eventually(func() string { return w.get("orphan").Status.Message }, timeout, interval).Should(ContainSubstring(`waiting for Session "not-yet"`))
		w.stopRun("orphan", v1alpha1.StopCancel)
		w.eventually("orphan", v1alpha1.PhaseTerminated, v1alpha1.ReasonCancelled)
	})

	It("tells the running attempt at once when the session's mode changes", func() {
		w.run("moded", nil)
		w.start("moded", 1)
		s := session("s")
		s.Spec.Mode = v1alpha1.ModeReadOnly
		s.Spec.ModeChangeReason = "incident: read-only until reviewed"
		Expect(k8sClient.Update(ctx, s)).To(Succeed())
		Eventually(func() v1alpha1.PermissionMode { return w.attempt("moded", 1).Spec.Mode }, timeout, interval).Should(Equal(v1alpha1.ModeReadOnly))
	})

	It("copies approvals to the current attempt", func() {
		w.run("approve", nil)
		w.start("approve", 1)
		w.approve("approve", v1alpha1.Approval{ActionID: "publish-1", Decision: v1alpha1.DecisionApprove})
		Eventually(func() []v1alpha1.Approval { return w.attempt("approve", 1).Spec.Approvals }, timeout, interval).Should(
			ContainElement(HaveField("ActionID", "publish-1")))
	})
})
