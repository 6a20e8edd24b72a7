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
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/internal/policy"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// DefaultFactGrace is the default fact grace: twice the gateway's default
// flush interval (1s), plus a second for the whole-second resolution of the
// times it compares.
const DefaultFactGrace = 3 * time.Second

// DefaultProgressWriteInterval is the default ProgressWriteInterval.
const DefaultProgressWriteInterval = 5 * time.Second

// DefaultRunnerServiceAccount is the service account attempt pods run as when
// the policy names none.
const DefaultRunnerServiceAccount = "agentrun-runner"

// ResearchRunReconciler is the termination owner: the only code that writes a
// ResearchRun's phase. It gathers the run, its RunAttempts and the current
// attempt's pod, asks internal/lifecycle for a decision, and applies it: one
// status write per pass, none when nothing changed.
type ResearchRunReconciler struct {
	client.Client
	// APIReader reads around the cache. Used only where a stale cache could
	// make the reconciler act twice (is a pod really gone?).
	APIReader client.Reader
	// liveRV remembers, per RunAttempt, the resourceVersion of its latest
	// live read while the cache is behind it (useLive, liveAhead).
	liveRV   sync.Map
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Clock is the only source of "now" for decisions and requeue times.
	Clock clock.PassiveClock
	// MaxConcurrentReconciles is the number of workers (default 4).
	MaxConcurrentReconciles int
	// Gateway says how attempt pods reach agentrun-gateway (its URL, and the
	// ConfigMap in each namespace that holds its CA).
	Gateway runpod.Gateway
	// GatewayCA is the gateway's CA bundle (PEM), kept in Gateway.CAConfigMap
	// in every namespace with attempts; nil when the gateway's certificate is
	// publicly trusted.
	GatewayCA []byte
	// GatewayCAFile, when set, is where GatewayCA was read from; it is
	// re-read so a rotated CA reaches every namespace.
	GatewayCAFile string
	// AttemptEgress, when set, is kept in every namespace with attempts (see
	// AttemptEgressPolicy).
	AttemptEgress *networkingv1.NetworkPolicy
	// FactGrace is how long after an attempt's pod stopped on its own the
	// decision waits for the gateway's last coalesced facts (lifecycle
	// Input.FactGrace); 0 means DefaultFactGrace, a negative value no wait.
	FactGrace time.Duration
	// ProgressWriteInterval paces status writes that only report progress
	// (usage, steps, the messages quoting them): at most one per interval per
	// run; 0 means DefaultProgressWriteInterval, a negative value no pacing.
	// A write that decides anything (a phase, reason, attempt, grant or
	// condition change) is never held back.
	ProgressWriteInterval time.Duration

	// facts records when an unprocessed fact arrived, per run, for the
	// fact-to-decision latency metric.
	facts *factClock
	// podExpectations remembers pods this process created whose creation the
	// cache has not shown yet, so a stale cache never yields a second pod.
	podExpectations *expectations
	// created remembers the UID of each attempt pod this process created
	// until its RunAttempt records it: no other pod is ever recorded.
	created *createdPods
	// admissions remembers the starts this process wrote that the cache does
	// not show yet, per session (the admission's expectations).
	admissions *admissions
	// progress paces progress-only status writes (ProgressWriteInterval).
	progress *progressWrites
	runners  *runners
	// egress keeps AttemptEgress between attempt starts and reports extra
	// egress policies (nil without AttemptEgress).
	egress *egressKeeper
}

var _ reconcile.Reconciler = (*ResearchRunReconciler)(nil)

// +kubebuilder:rbac:groups=agentrun.dev,resources=researchruns,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=researchruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=researchruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=agentrun.dev,resources=runattempts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agentrun.dev,resources=runattempts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=sessions,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=sessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=runtimepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=core,resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile is Get → stop if Terminated → gather → Decide → apply.
func (r *ResearchRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	run := &v1alpha1.ResearchRun{}
	if err := r.Get(ctx, req.NamespacedName, run); err != nil {
		r.facts.forget(req.NamespacedName)
		r.progress.forget(req.NamespacedName)
		r.created.forget(req.NamespacedName)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if run.Status.Phase == v1alpha1.PhaseTerminated {
		// Nothing to release: a run holds its session by its phase. Its
		// accounting still takes in facts written after it ended.
		r.facts.forget(req.NamespacedName)
		r.progress.forget(req.NamespacedName)
		r.created.forget(req.NamespacedName)
		return requeueOnConflict(r.settleAccounts(ctx, run))
	}

	g, err := r.gather(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stopped, err := r.stopForParent(ctx, run, g.policy); err != nil || stopped {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	in := lifecycle.Input{
		Now:        now,
		Name:       run.Name,
		Generation: run.Generation,
		Spec:       run.Spec,
		Status:     run.Status,
		Attempts:   g.facts,
		Children:   g.children,
		Pod:        g.pod,
		Queue:      g.queue,
		StopCause:  run.Annotations[v1alpha1.AnnotationStopCause],
		Blocked:    g.waiting,
		FactGrace:  r.factGrace(),
	}
	d := lifecycle.Decide(in)
	log.V(1).Info("Decided", "phase", d.Status.Phase, "reason", d.Status.Reason, "attempt", d.Attempt,
		"deletePod", d.DeletePod, "requeueAfter", d.RequeueAfter)

	if err := r.apply(ctx, run, g, d); err != nil {
		return requeueOnConflict(err)
	}
	if g.held > 0 && (d.RequeueAfter <= 0 || g.held < d.RequeueAfter) {
		return ctrl.Result{RequeueAfter: g.held}, nil
	}
	return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
}

// factGrace is FactGrace with its default.
func (r *ResearchRunReconciler) factGrace() time.Duration {
	switch {
	case r.FactGrace == 0:
		return DefaultFactGrace
	case r.FactGrace < 0:
		return 0
	}
	return r.FactGrace
}

// gathered is everything Decide needs, read from the cache.
type gathered struct {
	session  *v1alpha1.Session
	policy   *v1alpha1.RuntimePolicy
	attempts map[int32]*v1alpha1.RunAttempt
	facts    []lifecycle.AttemptFacts
	current  int32
	pod      lifecycle.PodObservation
	podObj   *corev1.Pod
	queue    lifecycle.QueueView
	// admitting: this pass found the session free and the run first in
	// line; its status write starts the run (admissions.settle).
	admitting bool
	// held is how long apply held back a progress-only status write; the
	// pass is requeued to write it then.
	held time.Duration
	// waiting says why the run cannot start yet (lifecycle Input.Blocked).
	waiting string
	// live holds the attempts this pass read live: none is read twice.
	live map[int32]bool
	// children are the run's child runs (lifecycle Input.Children).
	children []lifecycle.ChildView
}

func (r *ResearchRunReconciler) gather(ctx context.Context, run *v1alpha1.ResearchRun) (*gathered, error) {
	g := &gathered{attempts: map[int32]*v1alpha1.RunAttempt{}, pod: lifecycle.PodObservation{Phase: lifecycle.PodAbsent}}

	g.session = &v1alpha1.Session{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, g.session); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Session %s/%s: %w", run.Namespace, run.Spec.SessionRef.Name, err)
		}
		g.session = nil
		if run.Status.Phase == "" || run.Status.Phase == v1alpha1.PhasePending {
			g.waiting = fmt.Sprintf("waiting for Session %q", run.Spec.SessionRef.Name)
			return g, nil
		}
	}
	if g.session != nil {
		g.policy = &v1alpha1.RuntimePolicy{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: g.session.Spec.PolicyRef.Name}, g.policy); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading RuntimePolicy %s/%s: %w", run.Namespace, g.session.Spec.PolicyRef.Name, err)
			}
			g.policy = nil
			if run.Status.Phase == "" || run.Status.Phase == v1alpha1.PhasePending {
				g.waiting = fmt.Sprintf("waiting for RuntimePolicy %q of Session %q", g.session.Spec.PolicyRef.Name, g.session.Name)
				return g, nil
			}
		}
		if g.policy != nil && (run.Status.Phase == "" || run.Status.Phase == v1alpha1.PhasePending) {
			// A run never starts with a chain that is not the policy's
			// current, valid resolution: the agent would run a stale or empty
			// interceptor chain.
			if msg := policyNotReady(g.policy); msg != "" {
				g.waiting = msg
				return g, nil
			}
		}
	}

	if err := r.gatherAttempts(ctx, run, g); err != nil {
		return nil, err
	}
	if err := r.gatherLiveness(ctx, run, g); err != nil {
		return nil, err
	}

	if g.current > 0 {
		obs, pod, err := r.observePod(ctx, run, g.current, g.attempts[g.current])
		if err != nil {
			return nil, err
		}
		g.pod, g.podObj = obs, pod
		if err := r.confirmStoppedAttempt(ctx, run, g); err != nil {
			return nil, err
		}
	}

	q, admitting, err := r.queueView(ctx, run, g.session, g.policy)
	if err != nil {
		return nil, err
	}
	g.queue, g.admitting = q, admitting
	return g, nil
}

// gatherAttempts reads the RunAttempts the run controls into g: their facts
// in attempt order, and the current attempt number.
func (r *ResearchRunReconciler) gatherAttempts(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered) error {
	list := &v1alpha1.RunAttemptList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingLabels{v1alpha1.LabelRun: runpod.LabelValue(run.Name)}); err != nil {
		return fmt.Errorf("listing the RunAttempts of run %s: %w", klog.KObj(run), err)
	}
	g.current = run.Status.Attempt
	kids, err := r.gatherChildren(ctx, run)
	if err != nil {
		return err
	}
	g.children = kids
	for i := range list.Items {
		ra := &list.Items[i]
		if !metav1.IsControlledBy(ra, run) {
			continue
		}
		if live, err := r.liveAhead(ctx, ra); err != nil {
			return err
		} else if live != nil {
			ra = live
			g.markLive(live)
		}
		g.attempts[ra.Spec.Attempt] = ra
		g.facts = append(g.facts, lifecycle.AttemptFacts{
			Attempt:      ra.Spec.Attempt,
			Created:      ra.CreationTimestamp.Time,
			Grant:        ra.Spec.Grant,
			Status:       ra.Status,
			FactsWritten: statusWritten(ra),
		})
		g.current = max(g.current, ra.Spec.Attempt)
	}
	slices.SortFunc(g.facts, func(a, b lifecycle.AttemptFacts) int { return int(a.Attempt - b.Attempt) })
	return nil
}

// liveAhead returns the attempt read live when an earlier pass read it live
// at a newer resourceVersion than the cache now shows (nil when the cache has
// caught up, and the memory is dropped).
func (r *ResearchRunReconciler) liveAhead(ctx context.Context, cached *v1alpha1.RunAttempt) (*v1alpha1.RunAttempt, error) {
	key := client.ObjectKeyFromObject(cached)
	v, ok := r.liveRV.Load(key)
	if !ok {
		return nil, nil
	}
	if !olderRV(cached.ResourceVersion, v.(string)) {
		r.liveRV.Delete(key)
		return nil, nil
	}
	live := &v1alpha1.RunAttempt{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			r.liveRV.Delete(key)
			return nil, nil
		}
		return nil, fmt.Errorf("reading RunAttempt %s live: %w", klog.KObj(cached), err)
	}
	r.liveRV.Store(key, live.ResourceVersion)
	return live, nil
}

// olderRV reports whether resourceVersion a is older than b. Resource
// versions are opaque; both are etcd revisions here, compared as numbers,
// and anything unparsable counts as not older.
func olderRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x < y
}

// confirmStoppedAttempt reads the current attempt live once its pod has
// stopped, while the run is still deciding: what the decision then reads of
// it — an in-flight side effect whose outcome is unknown, the publication's
// settlement, the counts — decides whether the run is recovered (a new
// attempt replays the agent's work) and how it ends, and a cache stalled in
// its relist back-off after an API server restart can lag the gateway's
// writes by a minute, longer than the fact grace. One GET per pass, only for
// an active run whose pod has stopped; the cache serves every other pass.
func (r *ResearchRunReconciler) confirmStoppedAttempt(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered) error {
	cached := g.attempts[g.current]
	if cached == nil || g.live[g.current] || !g.pod.Stopped() || !run.Status.Phase.IsActive() {
		return nil
	}
	live := &v1alpha1.RunAttempt{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the cache's view stands; a deletion reaches it as an event
		}
		return fmt.Errorf("reading RunAttempt %s live: %w", klog.KObj(cached), err)
	}
	g.markLive(live)
	if live.ResourceVersion == cached.ResourceVersion || !metav1.IsControlledBy(live, run) {
		return nil
	}
	r.useLive(g, live)
	return nil
}

func (g *gathered) markLive(ra *v1alpha1.RunAttempt) {
	if g.live == nil {
		g.live = map[int32]bool{}
	}
	g.live[ra.Spec.Attempt] = true
}

// useLive replaces an attempt read from the cache with its live read,
// whole: its grant with its facts. It remembers the live resourceVersion, so
// that later passes do not go back to an older cached copy (liveAhead): a
// ledger raised from a live read, then judged against the cache's lower
// counts, reads as counters going back — a PolicyViolation that never was.
func (r *ResearchRunReconciler) useLive(g *gathered, live *v1alpha1.RunAttempt) {
	r.liveRV.Store(client.ObjectKeyFromObject(live), live.ResourceVersion)
	g.markLive(live)
	g.attempts[live.Spec.Attempt] = live
	for i := range g.facts {
		if g.facts[i].Attempt == live.Spec.Attempt {
			g.facts[i].Grant, g.facts[i].Status, g.facts[i].FactsWritten = live.Spec.Grant, live.Status, statusWritten(live)
		}
	}
}

// settleAccounts folds facts written after a run ended into its ledger (the
// decision of a Terminated run stands; see lifecycle's Terminated rung): one
// status write when an attempt's counts rose, none otherwise.
func (r *ResearchRunReconciler) settleAccounts(ctx context.Context, run *v1alpha1.ResearchRun) error {
	g := &gathered{attempts: map[int32]*v1alpha1.RunAttempt{}}
	if err := r.gatherAttempts(ctx, run, g); err != nil {
		return err
	}
	d := lifecycle.Decide(lifecycle.Input{Now: r.Clock.Now(), Name: run.Name, Generation: run.Generation,
		Spec: run.Spec, Status: run.Status, Attempts: g.facts, Children: g.children})
	next := run.DeepCopy()
	next.Status = d.Status
	_, err := patchStatusIfChanged(ctx, r.Client, run, next)
	return err
}

// observePod reads the current attempt's pod. A pod the cache does not show is
// confirmed absent with a live read before it counts as gone: a stale cache
// must never turn into a failed attempt. A pod is the attempt's only if its
// RunAttempt records its UID or this process created it (createdPods); any
// other pod with the attempt's name is no pod of the attempt's (ensurePod
// replaces it).
func (r *ResearchRunReconciler) observePod(ctx context.Context, run *v1alpha1.ResearchRun, attempt int32, ra *v1alpha1.RunAttempt) (lifecycle.PodObservation, *corev1.Pod, error) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: runpod.Name(run.Name, attempt)}
	created := ra != nil && ra.Spec.PodUID != ""
	if created {
		r.created.recorded(client.ObjectKeyFromObject(run), attempt)
	}
	pod := &corev1.Pod{}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) && (created || r.podExpectations.pending(key)) {
		err = r.APIReader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return lifecycle.PodObservation{Phase: lifecycle.PodAbsent, Created: created}, nil, nil
	case err != nil:
		return lifecycle.PodObservation{}, nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	if !created && !r.created.made(client.ObjectKeyFromObject(run), attempt, pod.UID) {
		// Not the operator's: the attempt has no pod yet.
		return lifecycle.PodObservation{Phase: lifecycle.PodAbsent}, nil, nil
	}
	if !metav1.IsControlledBy(pod, run) || pod.Labels[v1alpha1.LabelAttempt] != strconv.Itoa(int(attempt)) {
		return lifecycle.PodObservation{}, nil, fmt.Errorf("pod %s exists but does not belong to attempt %d of run %s", key, attempt, run.Name)
	}
	r.podExpectations.observed(key)
	if created && string(pod.UID) != ra.Spec.PodUID {
		// The attempt's pod was replaced by someone else: the original is gone.
		return lifecycle.PodObservation{Phase: lifecycle.PodAbsent, Created: true}, nil, nil
	}
	obs := lifecycle.PodObservation{
		Created:     true,
		Terminating: pod.DeletionTimestamp != nil,
		Message:     podMessage(pod),
	}
	if pod.Status.StartTime != nil {
		obs.StartTime = pod.Status.StartTime.Time
	}
	obs.FinishedAt = podFinished(pod)
	switch pod.Status.Phase {
	case corev1.PodRunning:
		obs.Phase = lifecycle.PodRunning
	case corev1.PodSucceeded:
		obs.Phase = lifecycle.PodSucceeded
	case corev1.PodFailed:
		obs.Phase = lifecycle.PodFailed
	default:
		obs.Phase = lifecycle.PodPending
	}
	return obs, pod, nil
}

// podFinished is when a pod that stopped (Succeeded or Failed) stopped: the
// latest finishedAt of its containers; zero if it has not stopped or does
// not say.
func podFinished(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return time.Time{}
	}
	var t time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && term.FinishedAt.After(t) {
			t = term.FinishedAt.Time
		}
	}
	return t
}

// statusWritten is when ra's status was last written: the latest time the
// API server recorded for a write to its status subresource (by the
// gateway; the operator never writes it). Zero if the object does not say
// (managed fields stripped).
func statusWritten(ra *v1alpha1.RunAttempt) time.Time {
	var t time.Time
	for _, mf := range ra.ManagedFields {
		if mf.Subresource == "status" && mf.Time != nil && mf.Time.After(t) {
			t = mf.Time.Time
		}
	}
	return t
}

func podMessage(pod *corev1.Pod) string {
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		return fmt.Sprintf("%s: %s", pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason)
		}
	}
	return ""
}

// apply carries out a decision. The status — which carries the decision:
// phase, reason, attempt number, finalize grant — is written first, and the
// events right after it; only then are attempts created, pods deleted and
// attempts told. A status write
// that is refused (conflict) therefore leaves nothing behind that a later
// pass could read as a different decision: it decides again from the same
// facts. A later step that fails is redone by the next pass, which finds the
// decision in the status.
func (r *ResearchRunReconciler) apply(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered, d lifecycle.Decision) error {
	next, wrote, err := r.writeStatus(ctx, run, g, d)
	if err != nil {
		return err
	}
	// The events follow the write that makes them true, before any step
	// that may fail: a later pass finds the decision in the status and has
	// no transition of its own to report.
	if wrote {
		for _, e := range d.Events {
			r.Recorder.Eventf(run, nil, e.Type, e.Reason, v1alpha1.EventActionDecide, "%s", e.Message)
		}
		observeTransitionAt(ctx, run, next, r.Clock.Now())
	}
	waited, hadFact := r.facts.take(client.ObjectKeyFromObject(run), r.Clock.Now())
	observeDecision(run, d, waited, hadFact)

	for _, n := range d.Superseded {
		if err := r.supersede(ctx, run, g.attempts[n]); err != nil {
			return fmt.Errorf("superseding attempt %d of run %s: %w", n, klog.KObj(run), err)
		}
	}

	if d.Attempt > 0 {
		// The pod comes first, so its RunAttempt is created with
		// spec.podUID set: one write fewer than creating, then patching it.
		// A pod whose RunAttempt is missing is served nothing by the gateway
		// (it waits for the attempt to name it), so the order is safe.
		var podUID string
		if ra := g.attempts[d.Attempt]; d.Status.Phase != v1alpha1.PhaseTerminated && !d.DeletePod && (ra == nil || ra.Spec.PodUID == "") {
			pod, err := r.ensurePod(ctx, run, g, d.Attempt)
			if err != nil {
				return fmt.Errorf("ensuring the pod of attempt %d of run %s: %w", d.Attempt, klog.KObj(run), err)
			}
			podUID = string(pod.UID)
		}
		if _, err := r.ensureAttempt(ctx, run, g, d, podUID); err != nil {
			return fmt.Errorf("ensuring RunAttempt %s/%s: %w", run.Namespace, runpod.Name(run.Name, d.Attempt), err)
		}
	}

	if d.DeletePod && g.podObj != nil && g.podObj.DeletionTimestamp == nil {
		if err := r.deletePod(ctx, g.podObj); err != nil {
			return fmt.Errorf("deleting pod %s: %w", klog.KObj(g.podObj), err)
		}
	}

	// Keep the attempt's view of the run (phase, zero grant) current when the
	// decision names no attempt (ending, Terminated), even when its pod has
	// stopped: the pod's token stays valid for up to an hour, and the
	// gateway refuses a Terminated attempt only if the attempt says so.
	if d.Attempt == 0 && g.current > 0 && g.attempts[g.current] != nil {
		if err := r.syncAttemptSpec(ctx, run, g, g.attempts[g.current], d, ""); err != nil {
			return fmt.Errorf("updating RunAttempt %s: %w", klog.KObj(g.attempts[g.current]), err)
		}
	}

	return nil
}

// writeStatus makes apply's first step: the status write that carries the
// decision (held back when it only reports progress and the pacing says
// wait), and the settlement of an admission this pass made. It returns the
// object as written and whether it wrote.
func (r *ResearchRunReconciler) writeStatus(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered,
	d lifecycle.Decision) (*v1alpha1.ResearchRun, bool, error) {
	next := run.DeepCopy()
	next.Status = d.Status
	key := client.ObjectKeyFromObject(run)
	if hold := r.progress.hold(key); hold > 0 && !g.admitting && progressOnly(&run.Status, &next.Status) {
		// Progress only: the facts are durable in the RunAttempts and this
		// write decides nothing; it is made when the pacing allows.
		g.held, next = hold, run
	}
	wrote, err := patchStatusIfChanged(ctx, r.Client, run, next)
	if wrote {
		r.progress.wrote(key)
	}
	if g.admitting {
		// The start stays remembered unless the write was refused or the
		// decision is not a start (a stop ended the run instead); a write
		// whose outcome is unknown (a timeout) may have started it.
		refused := apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err)
		started := d.Status.Phase.IsActive() && !refused
		r.admissions.settle(types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, run.Name, started)
	}
	return next, wrote, err
}

// policyNotReady says why a policy's chain cannot be handed to a new attempt
// yet, or "" when it can. The status says whether the operator has resolved
// the current generation; the spec itself must validate too, since a status
// is a report (its writer is held by admission policy
// runtimepolicy-status-authority, not by RBAC alone).
func policyNotReady(p *v1alpha1.RuntimePolicy) string {
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionValid)
	switch {
	case c == nil || c.ObservedGeneration != p.Generation || p.Status.ObservedGeneration != p.Generation:
		return fmt.Sprintf("waiting for RuntimePolicy %q to be resolved", p.Name)
	case c.Status != metav1.ConditionTrue:
		return fmt.Sprintf("RuntimePolicy %q is not valid, so no attempt starts: %s", p.Name, c.Message)
	}
	if errs := policy.Validate(&p.Spec); len(errs) > 0 {
		return fmt.Sprintf("RuntimePolicy %q is not valid, so no attempt starts: %s", p.Name,
			textutil.Truncate(errs.ToAggregate().Error(), 1024))
	}
	return ""
}

// attemptSpec is the spec an attempt should carry for decision d (decided
// by lifecycle.AttemptSpec from what was gathered). A new attempt's policy
// snapshot carries the chain resolved from the policy's validated spec,
// never status.resolvedChain as it stands.
func attemptSpec(run *v1alpha1.ResearchRun, g *gathered, d lifecycle.Decision, n int32, cur *v1alpha1.RunAttemptSpec) v1alpha1.RunAttemptSpec {
	in := lifecycle.AttemptSpecInput{
		Run: run, Decision: d, Attempt: n, PodName: runpod.Name(run.Name, n), Current: cur,
		Session: g.session, Policy: g.policy, Previous: g.attempts[n-1],
	}
	if cur == nil && g.policy != nil {
		in.PolicyReady = policyNotReady(g.policy) == ""
		if in.PolicyReady {
			in.Chain = policy.Resolve(g.policy.Spec.Interceptors)
		}
	}
	return lifecycle.AttemptSpec(in)
}

// ensureAttempt creates RunAttempt <run>-<n> if it does not exist (its name is
// deterministic, so AlreadyExists means done) and keeps its spec current.
// podUID, when set, is the attempt's pod, recorded on the attempt if it
// records none yet.
func (r *ResearchRunReconciler) ensureAttempt(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered, d lifecycle.Decision,
	podUID string) (*v1alpha1.RunAttempt, error) {
	n := d.Attempt
	if ra := g.attempts[n]; ra != nil {
		return ra, r.syncAttemptSpec(ctx, run, g, ra, d, podUID)
	}
	ra := &v1alpha1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: run.Namespace,
			Name:      runpod.Name(run.Name, n),
			Labels: map[string]string{
				v1alpha1.LabelRun:     runpod.LabelValue(run.Name),
				v1alpha1.LabelAttempt: strconv.Itoa(int(n)),
				v1alpha1.LabelSession: runpod.LabelValue(run.Spec.SessionRef.Name),
			},
		},
		Spec: attemptSpec(run, g, d, n, nil),
	}
	ra.Spec.PodUID = podUID
	if err := controllerutil.SetControllerReference(run, ra, r.Scheme); err != nil {
		return nil, err
	}
	if err := r.Create(ctx, ra); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ra), ra); err != nil {
			return nil, err
		}
		if !metav1.IsControlledBy(ra, run) {
			return nil, fmt.Errorf("RunAttempt %s exists and does not belong to run %s", klog.KObj(ra), run.Name)
		}
		return ra, r.syncAttemptSpec(ctx, run, g, ra, d, podUID)
	}
	attemptsStarted.Inc()
	g.attempts[n] = ra
	return ra, nil
}

func (r *ResearchRunReconciler) syncAttemptSpec(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered, ra *v1alpha1.RunAttempt,
	d lifecycle.Decision, podUID string) error {
	want := attemptSpec(run, g, d, ra.Spec.Attempt, &ra.Spec)
	if ra.Spec.Attempt != d.Attempt && d.Attempt != 0 {
		return nil
	}
	if want.PodUID == "" {
		want.PodUID = podUID
	}
	if equality.Semantic.DeepEqual(ra.Spec, want) {
		return nil
	}
	next := ra.DeepCopy()
	next.Spec = want
	if err := r.Patch(ctx, next, client.MergeFrom(ra)); err != nil {
		return err
	}
	*ra = *next
	return nil
}

// ensurePod creates attempt n's pod once, for an attempt that records no pod
// yet (one that does was created once: if it is gone, that is a failed
// attempt, never a new pod). The pod name is deterministic, so AlreadyExists
// means another pass created it — if this process holds the UID its create
// returned (createdPods); a pod of that name it did not create is never the
// attempt's (replaceForeignPod). Expectations cover the window in which the
// cache has not yet shown a pod this process created.
func (r *ResearchRunReconciler) ensurePod(ctx context.Context, run *v1alpha1.ResearchRun, g *gathered, n int32) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: run.Namespace, Name: runpod.Name(run.Name, n)}
	var pod *corev1.Pod
	switch {
	case g.current == n && g.podObj != nil:
		pod = g.podObj // observePod returns only the attempt's own pod
	default:
		sa := DefaultRunnerServiceAccount
		if g.policy != nil && g.policy.Spec.RunnerServiceAccountName != "" {
			sa = g.policy.Spec.RunnerServiceAccountName
		}
		built, err := runpod.Build(run, n, sa, r.Gateway)
		if err != nil {
			return nil, err
		}
		if err := controllerutil.SetControllerReference(run, built, r.Scheme); err != nil {
			return nil, err
		}
		if err := r.runners.ensure(ctx, r.Client, r.APIReader, run.Namespace, sa); err != nil {
			return nil, fmt.Errorf("preparing runner service account %s/%s: %w", run.Namespace, sa, err)
		}
		r.podExpectations.expect(key)
		if err := r.Create(ctx, built); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				r.podExpectations.observed(key)
				return nil, err
			}
			built = &corev1.Pod{}
			if err := r.APIReader.Get(ctx, key, built); err != nil {
				return nil, err
			}
			if !r.created.made(client.ObjectKeyFromObject(run), n, built.UID) {
				r.podExpectations.observed(key)
				return nil, r.replaceForeignPod(ctx, run, built, n)
			}
		} else {
			r.created.remember(client.ObjectKeyFromObject(run), n, built.UID)
			if r.egress != nil {
				if err := r.egress.reportExtra(ctx, run, built); err != nil {
					logf.FromContext(ctx).Error(err, "Cannot check the NetworkPolicies that select the attempt's pod", "pod", klog.KObj(built))
				}
			}
		}
		pod = built
	}
	if !metav1.IsControlledBy(pod, run) {
		return nil, fmt.Errorf("pod %s exists and does not belong to run %s", key, run.Name)
	}
	return pod, nil
}

// replaceForeignPod deals with a pod that has attempt n's name but that this
// process did not create: a pod someone pre-created with the run as its
// controller (to be served as the attempt, with its grant and the policy's
// models and tools), or one an earlier operator process created but whose
// RunAttempt never recorded it. Either way nobody can tell it from a
// foreign one, and it never becomes the attempt's pod: one the run controls
// is deleted (UID precondition) and the attempt's pod is created once it is
// gone (its deletion requeues the run); one the run does not control is
// not the operator's to delete, and the attempt waits until it is removed.
// It returns the error that ends this pass.
func (r *ResearchRunReconciler) replaceForeignPod(ctx context.Context, run *v1alpha1.ResearchRun, pod *corev1.Pod, n int32) error {
	if !metav1.IsControlledBy(pod, run) {
		r.Recorder.Eventf(run, pod, corev1.EventTypeWarning, v1alpha1.EventReasonForeignPodInTheWay, v1alpha1.EventActionCreatePod,
			"Pod %s has the name of attempt %d's pod but is not controlled by this run; the attempt starts once it is removed", pod.Name, n)
		return fmt.Errorf("pod %s exists and does not belong to run %s", klog.KObj(pod), run.Name)
	}
	if pod.DeletionTimestamp == nil {
		if err := r.deletePod(ctx, pod); err != nil {
			return fmt.Errorf("deleting pod %s, which the operator did not create: %w", klog.KObj(pod), err)
		}
		r.Recorder.Eventf(run, pod, corev1.EventTypeWarning, v1alpha1.EventReasonForeignPodReplaced, v1alpha1.EventActionCreatePod,
			"Pod %s (uid %s) has the name of attempt %d's pod and names this run as its controller, but the operator did not create it; "+
				"it is deleted, never served as the attempt, and the attempt's pod is created once it is gone", pod.Name, pod.UID, n)
	}
	return fmt.Errorf("pod %s was not created by the operator; waiting for it to be gone before creating attempt %d's pod", klog.KObj(pod), n)
}

func (r *ResearchRunReconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// supersede marks an older attempt superseded and deletes its pod. Its facts
// are still counted; they no longer drive the phase.
func (r *ResearchRunReconciler) supersede(ctx context.Context, run *v1alpha1.ResearchRun, ra *v1alpha1.RunAttempt) error {
	if ra == nil {
		return nil
	}
	if !ra.Spec.Superseded || ra.Spec.Grant != (v1alpha1.Grant{}) {
		next := ra.DeepCopy()
		next.Spec.Superseded = true
		next.Spec.Grant = v1alpha1.Grant{}
		if err := r.Patch(ctx, next, client.MergeFrom(ra)); err != nil {
			return err
		}
		*ra = *next
	}
	pod := &corev1.Pod{}
	err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: runpod.Name(run.Name, ra.Spec.Attempt)}, pod)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp == nil && metav1.IsControlledBy(pod, run) {
		return r.deletePod(ctx, pod)
	}
	return nil
}

// SetupWithManager sets up the controller with the Manager.
func (r *ResearchRunReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("researchrun-controller")
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	r.facts = newFactClock(r.Clock)
	registerPhaseCollector(mgr.GetCache(), mgr.Elected())
	r.podExpectations = newExpectations(r.Clock, time.Minute)
	r.created = newCreatedPods()
	r.admissions = newAdmissions()
	if interval := r.ProgressWriteInterval; interval >= 0 {
		if interval == 0 {
			interval = DefaultProgressWriteInterval
		}
		r.progress = &progressWrites{clock: r.Clock, interval: interval, last: map[types.NamespacedName]time.Time{}}
	}
	if r.Gateway.URL == "" {
		r.Gateway.URL = DefaultGatewayURL
	}
	if len(r.GatewayCA) > 0 && r.Gateway.CAConfigMap == "" {
		r.Gateway.CAConfigMap = runpod.DefaultGatewayCAConfigMap
	}
	r.runners = &runners{caConfigMap: r.Gateway.CAConfigMap, ca: r.GatewayCA, caFile: r.GatewayCAFile, caRead: time.Now(),
		egress: r.AttemptEgress, ready: map[string]bool{}}
	if r.AttemptEgress != nil {
		r.egress = &egressKeeper{Client: mgr.GetClient(), runners: r.runners, recorder: r.Recorder,
			reported: map[types.NamespacedName]string{}}
		if err := setupEgressKeeper(mgr, r.egress); err != nil {
			return err
		}
	}

	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ResearchRun{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&v1alpha1.RunAttempt{}, r.facts.wrap(), builder.WithPredicates(factsChanged)).
		Watches(&corev1.Pod{}, r.facts.wrap(), builder.WithPredicates(factsChanged)).
		Watches(&v1alpha1.ResearchRun{}, r.queueChanged()).
		Watches(&v1alpha1.ResearchRun{}, r.treeChanged()).
		Watches(&v1alpha1.Session{}, handler.EnqueueRequestsFromMapFunc(r.runsOfSession), builder.WithPredicates(sessionChanged)).
		Watches(&v1alpha1.RuntimePolicy{}, handler.EnqueueRequestsFromMapFunc(r.pendingRunsOfPolicy)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("researchrun").
		Complete(r)
}
