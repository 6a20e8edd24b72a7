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
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

const (
	// policyRefIndex indexes Sessions by spec.policyRef.name.
	policyRefIndex = "spec.policyRef.name"
	// maxQueuedNames bounds status.queuedRuns; status.queuedCount has the total.
	maxQueuedNames = 20
	// maxModeHistory bounds status.modeHistory.
	maxModeHistory = 20
)

// SessionReconciler maintains a Session's status (effective mode, active and
// queued runs, counts, the audited mode history) and, when the Session is
// deleted, ends its runs as Cancelled before letting it go. It never decides a
// run's phase: the ResearchRun reconciler does.
type SessionReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Clock is the source of "now" for coalescing the summary (default: real).
	Clock clock.PassiveClock

	// changes remembers, per session, the run changes its summary has not
	// taken in yet (see coalesce).
	changes *runChanges
}

var _ reconcile.Reconciler = (*SessionReconciler)(nil)

// +kubebuilder:rbac:groups=agentrun.dev,resources=sessions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=sessions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=agentrun.dev,resources=sessions/finalizers,verbs=update
// +kubebuilder:rbac:groups=agentrun.dev,resources=researchruns,verbs=get;list;watch;update;patch

// Reconcile keeps the Session's status true to its runs.
func (r *SessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	session := &v1alpha1.Session{}
	if err := r.Get(ctx, req.NamespacedName, session); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	runs := &v1alpha1.ResearchRunList{}
	if err := r.List(ctx, runs, client.InNamespace(session.Namespace), client.MatchingFields{sessionRefIndex: session.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the runs of Session %s: %w", klog.KObj(session), err)
	}

	if session.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, session, runs.Items)
	}
	if wait := r.coalesce(session); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if !controllerutil.ContainsFinalizer(session, v1alpha1.SessionFinalizer) {
		next := session.DeepCopy()
		controllerutil.AddFinalizer(next, v1alpha1.SessionFinalizer)
		if err := r.Patch(ctx, next, client.MergeFrom(session)); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer of Session %s: %w", klog.KObj(session), err)
		}
		session = next
	}

	policy := &v1alpha1.RuntimePolicy{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: session.Namespace, Name: session.Spec.PolicyRef.Name}, policy); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading RuntimePolicy %s/%s: %w", session.Namespace, session.Spec.PolicyRef.Name, err)
		}
		policy = nil
	}

	status := *session.Status.DeepCopy()
	status.ObservedGeneration = session.Generation
	status.Mode = effectiveMode(session, policy)
	r.countRuns(&status, runs.Items)
	changed := r.recordModeChange(ctx, session, &status, runs.Items)

	setSessionConditions(&status, session, policy)

	next := session.DeepCopy()
	next.Status = status
	// The optimistic lock keeps this write from undoing a concurrent one (a
	// mode change recorded by another pass).
	wrote, err := patchStatusIfChanged(ctx, r.Client, session, next)
	if err != nil {
		return requeueOnConflict(err)
	}
	r.changes.taken(req.NamespacedName)
	if wrote && changed != nil {
		r.Recorder.Eventf(session, nil, corev1.EventTypeNormal, v1alpha1.EventReasonPermissionModeChanged, v1alpha1.EventActionSwitchMode,
			"%s", modeChangeNote(*changed))
		log.Info("Permission mode changed", "by", changed.By, "from", changed.From, "to", changed.To,
			"activeRun", changed.ActiveRun, "activeRunPhase", changed.ActiveRunPhase, "activeRunSteps", changed.ActiveRunSteps,
			"queuedRuns", changed.QueuedRuns, "moreQueuedRuns", changed.MoreQueuedRuns)
	}
	return ctrl.Result{}, nil
}

// setSessionConditions sets Ready, Reconciling and Stalled from the
// session's policy, as kstatus (Flux, Argo CD) reads them: a policy that does
// not exist yet or is not resolved yet is InProgress (Reconciling=True; it
// may come: a Session applied with its policy); an invalid one is Failed
// (Stalled=True; only a fix of the policy helps); a valid one is Current
// (Ready=True). Its messages change only with the policy or the mode.
func setSessionConditions(status *v1alpha1.SessionStatus, session *v1alpha1.Session, policy *v1alpha1.RuntimePolicy) {
	name := session.Spec.PolicyRef.Name
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: T, Reason: v1alpha1.ConditionReasonPolicyFound,
		Message: fmt.Sprintf("governed by RuntimePolicy %q in mode %s", name, status.Mode), ObservedGeneration: session.Generation}
	reconciling, stalled := F, F
	var valid *metav1.Condition
	if policy != nil {
		valid = meta.FindStatusCondition(policy.Status.Conditions, v1alpha1.ConditionValid)
	}
	switch {
	case policy == nil:
		ready.Status, ready.Reason, reconciling = F, v1alpha1.ConditionReasonPolicyNotFound, T
		ready.Message = fmt.Sprintf("RuntimePolicy %q not found; runs wait in Pending", name)
	case valid == nil || valid.ObservedGeneration != policy.Generation || policy.Status.ObservedGeneration != policy.Generation:
		ready.Status, ready.Reason, reconciling = F, v1alpha1.ConditionReasonPolicyNotResolved, T
		ready.Message = fmt.Sprintf("waiting for RuntimePolicy %q to be resolved; runs wait in Pending", name)
	case valid.Status != T:
		ready.Status, ready.Reason, stalled = F, v1alpha1.ConditionReasonPolicyInvalid, T
		ready.Message = textutil.Truncate(fmt.Sprintf("RuntimePolicy %q is not valid, so no run of the session leaves Pending: %s",
			name, valid.Message), 1024)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	rec := ready
	rec.Type, rec.Status = v1alpha1.ConditionReconciling, reconciling
	setAbnormal(&status.Conditions, rec)
	st := ready
	st.Type, st.Status = v1alpha1.ConditionStalled, stalled
	setAbnormal(&status.Conditions, st)
}

func displayMode(m v1alpha1.PermissionMode) string {
	if m == "" {
		return "(default)"
	}
	return string(m)
}

// effectiveMode is spec.mode, or the policy's default, never above the ceiling.
func effectiveMode(session *v1alpha1.Session, policy *v1alpha1.RuntimePolicy) v1alpha1.PermissionMode {
	mode := session.Spec.Mode
	if policy == nil {
		if mode == "" {
			return v1alpha1.ModeReadOnly
		}
		return mode
	}
	if mode == "" {
		mode = policy.Spec.DefaultMode
	}
	if ceiling := policy.Spec.MaxMode; ceiling != "" && mode.Rank() > ceiling.Rank() {
		mode = ceiling
	}
	return mode
}

// countRuns fills the summary from the session's runs: the active run (the
// one whose phase holds the session), the waiting runs in queue order, and
// the counts by phase.
func (r *SessionReconciler) countRuns(status *v1alpha1.SessionStatus, runs []v1alpha1.ResearchRun) {
	status.Runs = v1alpha1.PhaseCounts{}
	status.ActiveRun = lifecycle.Holder(queueEntries(runs))
	var waiting []*v1alpha1.ResearchRun
	for i := range runs {
		run := &runs[i]
		switch run.Status.Phase {
		case "", v1alpha1.PhasePending, v1alpha1.PhaseQueued:
			status.Runs.Queued++
			if run.DeletionTimestamp == nil {
				waiting = append(waiting, run)
			}
		case v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering:
			status.Runs.Running++
		case v1alpha1.PhaseFinalizing:
			status.Runs.Finalizing++
		case v1alpha1.PhaseTerminated:
			status.Runs.Terminated++
		}
	}
	slices.SortFunc(waiting, fifo)
	status.QueuedCount = int32(len(waiting))
	status.QueuedRuns = nil
	for _, run := range waiting[:min(len(waiting), maxQueuedNames)] {
		status.QueuedRuns = append(status.QueuedRuns, run.Name)
	}
}

// recordModeChange moves the webhook's audit stamp (annotation) into
// status.modeHistory once, with what the session was doing (its active and
// queued runs, from status as countRuns left it and the cached runs), and
// returns the entry it added. A refused status write re-gathers on the retry.
func (r *SessionReconciler) recordModeChange(ctx context.Context, session *v1alpha1.Session, status *v1alpha1.SessionStatus, runs []v1alpha1.ResearchRun) *v1alpha1.ModeChange {
	raw, ok := session.Annotations[v1alpha1.AnnotationModeChange]
	if !ok {
		return nil
	}
	change := &v1alpha1.ModeChange{}
	if err := json.Unmarshal([]byte(raw), change); err != nil {
		logf.FromContext(ctx).Error(err, "Ignoring malformed mode-change annotation", "session", session.Name)
		return nil
	}
	if recorded(status.ModeHistory, change) {
		return nil
	}
	*change = withSwitchContext(*change, status, runs)
	status.ModeHistory = append(status.ModeHistory, *change)
	if n := len(status.ModeHistory); n > maxModeHistory {
		status.ModeHistory = status.ModeHistory[n-maxModeHistory:]
	}
	return change
}

// finalize ends the session's runs as Cancelled (by setting spec.stop with a
// cause the termination owner reports), and releases the Session once every
// run is Terminated.
func (r *SessionReconciler) finalize(ctx context.Context, session *v1alpha1.Session, runs []v1alpha1.ResearchRun) error {
	if !controllerutil.ContainsFinalizer(session, v1alpha1.SessionFinalizer) {
		return nil
	}
	open := 0
	for i := range runs {
		run := &runs[i]
		if run.Status.Phase == v1alpha1.PhaseTerminated {
			continue
		}
		open++
		if run.Spec.Stop == v1alpha1.StopCancel {
			continue
		}
		next := run.DeepCopy()
		next.Spec.Stop = v1alpha1.StopCancel
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[v1alpha1.AnnotationStopCause] = fmt.Sprintf("session %s was deleted", session.Name)
		if err := r.Patch(ctx, next, client.MergeFrom(run)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("asking run %s to stop: %w", klog.KObj(run), err)
		}
	}
	if open > 0 {
		return nil // the runs' terminations requeue us
	}
	next := session.DeepCopy()
	controllerutil.RemoveFinalizer(next, v1alpha1.SessionFinalizer)
	if err := r.Patch(ctx, next, client.MergeFrom(session)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer of Session %s: %w", klog.KObj(session), err)
	}
	return nil
}

// The summary of a session (activeRun, queuedRuns, counts) follows its runs,
// and every phase change of a run would otherwise cost its session a status
// write. Nothing waits on the summary (a run's admission is decided from the
// runs themselves), so it is written once the session's runs have been quiet
// for sessionQuietDelay — at most once per that delay per session, and only
// when it changed — or, under constant change, sessionMaxDelay after the
// first change it has not taken in.
const (
	sessionQuietDelay = time.Second
	sessionMaxDelay   = 5 * time.Second
)

// runChanges is, per session, when its runs first and last changed since its
// summary was last written.
type runChanges struct {
	mu      sync.Mutex
	pending map[types.NamespacedName]changeWindow
}

type changeWindow struct{ first, last time.Time }

func (c *runChanges) record(key types.NamespacedName, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.pending[key]
	if !ok {
		w.first = now
	}
	w.last = now
	c.pending[key] = w
}

func (c *runChanges) taken(key types.NamespacedName) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, key)
}

// coalesce says how long to wait before writing the session's summary: until
// its runs have been quiet for sessionQuietDelay, or sessionMaxDelay after
// their first change; 0 to write now. Only run changes wait: a pass for the
// session's own spec, mode-change stamp or finalizer writes at once.
func (r *SessionReconciler) coalesce(session *v1alpha1.Session) time.Duration {
	if r.changes == nil || session.Status.ObservedGeneration != session.Generation ||
		!controllerutil.ContainsFinalizer(session, v1alpha1.SessionFinalizer) {
		return 0
	}
	if modeChangePending(session) {
		return 0
	}
	r.changes.mu.Lock()
	defer r.changes.mu.Unlock()
	w, ok := r.changes.pending[client.ObjectKeyFromObject(session)]
	if !ok {
		return 0
	}
	now := r.Clock.Now()
	wait := min(w.last.Add(sessionQuietDelay).Sub(now), w.first.Add(sessionMaxDelay).Sub(now))
	return max(wait, 0)
}

// modeChangePending reports whether the session carries a mode-change stamp
// its status.modeHistory does not have yet (recordModeChange's test).
func modeChangePending(session *v1alpha1.Session) bool {
	raw, ok := session.Annotations[v1alpha1.AnnotationModeChange]
	if !ok {
		return false
	}
	change := &v1alpha1.ModeChange{}
	if err := json.Unmarshal([]byte(raw), change); err != nil {
		return false // recordModeChange ignores it too
	}
	return !recorded(session.Status.ModeHistory, change)
}

// recorded reports whether history already holds the mode-change stamp.
func recorded(history []v1alpha1.ModeChange, change *v1alpha1.ModeChange) bool {
	return slices.ContainsFunc(history, func(h v1alpha1.ModeChange) bool {
		return h.Time.Equal(&change.Time) && h.To == change.To && h.By == change.By
	})
}

// sessionOfRun enqueues a run's session after sessionQuietDelay when the
// run's phase or deletion changes (what a session summarizes), and records
// the change for coalesce.
func (r *SessionReconciler) sessionOfRun() handler.EventHandler {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		run, ok := o.(*v1alpha1.ResearchRun)
		if !ok {
			return
		}
		key := types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}
		r.changes.record(key, r.Clock.Now())
		q.AddAfter(reconcile.Request{NamespacedName: key}, sessionQuietDelay)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*v1alpha1.ResearchRun)
			run, okNew := e.ObjectNew.(*v1alpha1.ResearchRun)
			if okOld && okNew && old.Status.Phase == run.Status.Phase && old.DeletionTimestamp.Equal(run.DeletionTimestamp) {
				return // only phases and deletion change what a session summarizes
			}
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}

// SetupWithManager sets up the controller with the Manager.
func (r *SessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder("session-controller")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.changes = &runChanges{pending: map[types.NamespacedName]changeWindow{}}
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes need no recount of their own: run events
		// (coalesced) bring the changes it summarizes.
		For(&v1alpha1.Session{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, deletionChanged))).
		Watches(&v1alpha1.ResearchRun{}, r.sessionOfRun()).
		Watches(&v1alpha1.RuntimePolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			list := &v1alpha1.SessionList{}
			if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{policyRefIndex: o.GetName()}); err != nil {
				return nil
			}
			reqs := make([]reconcile.Request, 0, len(list.Items))
			for i := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
			return reqs
		})).
		Named("session").
		Complete(r)
}
