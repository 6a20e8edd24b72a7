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
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

	// switchMode switches the session's mode as a user would through the
	// admission webhook, which this suite does not run: spec.mode, a new
	// reason, and the webhook's stamp.
	switchMode := func(name string, to v1alpha1.PermissionMode, by, reason string) v1alpha1.ModeChange {
		GinkgoHelper()
		var stamp v1alpha1.ModeChange
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s := session(name)
			stamp = v1alpha1.ModeChange{From: s.Spec.Mode, To: to, By: by, Reason: reason, Time: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}
			raw, err := json.Marshal(stamp)
			Expect(err).NotTo(HaveOccurred())
			s.Spec.Mode, s.Spec.ModeChangeReason = to, reason
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[v1alpha1.AnnotationModeChange] = string(raw)
			return k8sClient.Update(ctx, s)
		})).To(Succeed())
		return stamp
	}
	// switchRecorded waits for the switch in status.modeHistory and for its
	// PermissionModeChanged event, and returns both.
	switchRecorded := func(name string, stamp v1alpha1.ModeChange) (v1alpha1.ModeChange, eventsv1.Event) {
		GinkgoHelper()
		var entry v1alpha1.ModeChange
		Eventually(func(g Gomega) {
			h := session(name).Status.ModeHistory
			g.Expect(h).NotTo(BeEmpty())
			entry = h[len(h)-1]
			g.Expect(entry.Time.Equal(&stamp.Time) && entry.To == stamp.To && entry.By == stamp.By).To(BeTrue(), "the last entry is this switch")
		}, timeout, interval).Should(Succeed())
		var ev eventsv1.Event
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(w.ns))).To(Succeed())
			var found []eventsv1.Event
			for _, e := range list.Items {
				if e.Regarding.Kind == "Session" && e.Regarding.Name == name && e.Reason == v1alpha1.EventReasonPermissionModeChanged &&
					strings.HasSuffix(e.Note, ": "+stamp.Reason) {
					found = append(found, e)
				}
			}
			g.Expect(found).To(HaveLen(1), "one event for the switch")
			ev = found[0]
		}, timeout, interval).Should(Succeed())
		return entry, ev
	}

	It("audits a mode switch with what the session was doing: the active run, its phase and step, and the queue", func() {
		w.run("r1-working", nil)
		w.start("r1-working", 1)
		w.agent("r1-working", 1, func(s *v1alpha1.RunAttemptStatus) { s.Steps, s.LastProgressStep = 3, 3 })
		w.run("r2-waiting", nil)
		w.eventually("r2-waiting", v1alpha1.PhaseQueued, "")
		Eventually(func() int64 { return w.get("r1-working").Status.Steps }, timeout, interval).Should(Equal(int64(3)))
		Eventually(func(g Gomega) {
			s := session("s")
			g.Expect(s.Status.ActiveRun).To(Equal("r1-working"))
			g.Expect(s.Status.QueuedRuns).To(Equal([]string{"r2-waiting"}))
		}, timeout, interval).Should(Succeed())

		stamp := switchMode("s", v1alpha1.ModeReadOnly, "alice", "incident 4711: read-only until reviewed")
		entry, ev := switchRecorded("s", stamp)
		Expect(entry.By).To(Equal("alice"))
		Expect(entry.To).To(Equal(v1alpha1.ModeReadOnly))
		Expect(entry.Reason).To(Equal("incident 4711: read-only until reviewed"))
		Expect(entry.ActiveRun).To(Equal("r1-working"))
		Expect(entry.ActiveRunPhase).To(Equal(v1alpha1.PhaseRunning))
		Expect(entry.ActiveRunSteps).To(Equal(int64(3)))
		Expect(entry.QueuedRuns).To(Equal([]string{"r2-waiting"}))
		Expect(entry.MoreQueuedRuns).To(BeZero())
		Expect(ev.Type).To(Equal("Normal"))
		Expect(ev.Note).To(Equal("alice switched the permission mode from (default) to ReadOnly during run r1-working (Running, step 3) " +
			"with r2-waiting queued: incident 4711: read-only until reviewed"))
		// The switch still reaches the running attempt.
		Eventually(func() v1alpha1.PermissionMode { return w.attempt("r1-working", 1).Spec.Mode }, timeout, interval).Should(Equal(v1alpha1.ModeReadOnly))
	})

	It("audits a mode switch with no active run as such, leaving the context empty", func() {
		w.run("done", nil)
		w.start("done", 1)
		w.finish("done", 1, v1alpha1.SettlementComplete)
		w.eventually("done", v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted)
		Eventually(func() string { return session("s").Status.ActiveRun }, timeout, interval).Should(BeEmpty())

		stamp := switchMode("s", v1alpha1.ModePlan, "bob", "review before the next run")
		entry, ev := switchRecorded("s", stamp)
		Expect(entry.ActiveRun).To(BeEmpty(), "a Terminated run is not the active run")
		Expect(entry.ActiveRunPhase).To(BeEmpty())
		Expect(entry.ActiveRunSteps).To(BeZero())
		Expect(entry.QueuedRuns).To(BeEmpty())
		Expect(entry.MoreQueuedRuns).To(BeZero())
		Expect(ev.Note).To(Equal("bob switched the permission mode from (default) to Plan with no active run and nothing queued: review before the next run"))
		Expect(ev.Note).To(ContainSubstring("no active run"))
	})

	It("copies approvals to the current attempt", func() {
		w.run("approve", nil)
		w.start("approve", 1)
		w.approve("approve", v1alpha1.Approval{ActionID: "publish-1", Decision: v1alpha1.DecisionApprove})
		Eventually(func() []v1alpha1.Approval { return w.attempt("approve", 1).Spec.Approvals }, timeout, interval).Should(
			ContainElement(HaveField("ActionID", "publish-1")))
	})
})
