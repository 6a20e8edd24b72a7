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

// Package watch is the run stream's status producer: a reconciler of
// ResearchRuns that publishes what changed in a run's status (runstate's
// events) to the run's stream. It runs in agentrun-stream behind leader
// election, so one process writes a run's status events. Its memory of
// each run — a runstate.Checkpoint — is kept in a JetStream key-value
// bucket beside the events and caught up from the events stored after it,
// so a restarted watcher neither repeats an event nor skips one.
//
// It is a side path: the run never waits for it, and a failure to publish
// is retried (requeued) without touching the run.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/runstate"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// Bucket is the key-value bucket of the watcher's checkpoints.
const Bucket = "AGENTRUN_STREAM_WATCH"

// Store is what the watcher needs of the run stream's store.
type Store interface {
	Publish(ctx context.Context, run stream.RunKey, ev stream.Event) (uint64, error)
	Replay(ctx context.Context, run stream.RunKey, from uint64, fn func(stream.Event) error) error
	Last(ctx context.Context, run stream.RunKey) (stream.Event, time.Time, bool, error)
	Trim(ctx context.Context, run stream.RunKey, maxBytes int64) (uint64, error)
}

// DefaultTrimEvery is how often an active run's stream is trimmed to its
// policy's spec.events.maxBytes; a run is trimmed once more when it ends.
const DefaultTrimEvery = time.Minute

// The end of a run's stream waits for the gateways: RUN_FINISHED (or
// RUN_ERROR) is published once the run's stream has had no gateway event
// for Quiet — the gateways' buffers publish the blocks of its last answers
// first — but at most MaxEndWait after the run ended.
const (
	DefaultQuiet      = time.Second
	DefaultMaxEndWait = 10 * time.Second
)

// Reconciler publishes ResearchRun status changes to their streams.
type Reconciler struct {
	Client client.Reader
	Store  Store
	// KV keeps checkpoints (nil: in memory only; a restart replays each
	// run's stream from its first event).
	KV jetstream.KeyValue
	// Quiet and MaxEndWait: see DefaultQuiet (defaults when zero).
	Quiet, MaxEndWait time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TrimEvery: see DefaultTrimEvery (the default when zero).
	TrimEvery time.Duration

	mu  sync.Mutex
	mem map[types.NamespacedName]runstate.Checkpoint
	// trims is when each run was last trimmed, and whether since it ended.
	trims map[types.NamespacedName]trimmed
}

type trimmed struct {
	at    time.Time
	ended bool
}

// OpenBucket creates or opens the checkpoint bucket on the store's
// connection.
func OpenBucket(ctx context.Context, s *store.Store) (jetstream.KeyValue, error) {
	js, err := jetstream.New(s.Conn())
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "agentrun-stream: the status watcher's checkpoint per run",
		History: 1, Storage: jetstream.FileStorage,
	})
}

// SetupWithManager watches ResearchRuns.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ResearchRun{}).
		Named("runstream").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}

// Reconcile publishes what changed in one run's status since its checkpoint.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var run v1alpha1.ResearchRun
	if err := r.Client.Get(ctx, req.NamespacedName, &run); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	key := stream.RunKey{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID)}
	ret, err := r.retention(ctx, &run)
	if err != nil {
		return ctrl.Result{}, err
	}
	cp, err := r.checkpoint(ctx, req.NamespacedName, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	evs := runstate.Diff(cp, &run)
	if len(evs) == 0 {
		return r.sweep(ctx, req.NamespacedName, key, &run, cp, ret, ctrl.Result{}), nil
	}
	var res ctrl.Result
	if wait := r.endWait(ctx, key, &run, evs); wait > 0 {
		evs, res = evs[:len(evs)-1], ctrl.Result{RequeueAfter: wait}
	}
	for _, ev := range evs {
		ev.TTL = ret.Age()
		seq, err := r.Store.Publish(ctx, key, ev)
		if err != nil {
			// What was published is folded in; the rest is retried.
			r.save(ctx, req.NamespacedName, key, cp)
			return ctrl.Result{RequeueAfter: time.Second}, fmt.Errorf("publish %s of %s: %w", ev.Type, key, err)
		}
		ev.Seq = seq
		cp = runstate.Fold(cp, ev)
	}
	r.save(ctx, req.NamespacedName, key, cp)
	return r.sweep(ctx, req.NamespacedName, key, &run, cp, ret, res), nil
}

// retention is the run's policy's spec.events: the run names its Session,
// the Session its RuntimePolicy. A missing Session or policy means the
// defaults (nil).
func (r *Reconciler) retention(ctx context.Context, run *v1alpha1.ResearchRun) (*v1alpha1.EventRetention, error) {
	var s v1alpha1.Session
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: run.Spec.SessionRef.Name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session of %s/%s: %w", run.Namespace, run.Name, err)
	}
	var p v1alpha1.RuntimePolicy
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: s.Spec.PolicyRef.Name}, &p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy of %s/%s: %w", run.Namespace, run.Name, err)
	}
	return &p.Spec.Events, nil
}

// sweep trims the run's stream to its policy's maxBytes: at most once per
// TrimEvery while the run is active (requeueing it for the next one), and
// once when its stream has ended. A failed trim is logged and tried again
// later; it never fails the reconcile. It returns res with the requeue
// the next trim needs.
func (r *Reconciler) sweep(ctx context.Context, nn types.NamespacedName, key stream.RunKey,
	run *v1alpha1.ResearchRun, cp runstate.Checkpoint, ret *v1alpha1.EventRetention, res ctrl.Result,
) ctrl.Result {
	ended := cp.Finished && run.Status.Phase == v1alpha1.PhaseTerminated
	if !ended && !run.Status.Phase.IsActive() {
		return res
	}
	now, every := time.Now, r.TrimEvery
	if r.Now != nil {
		now = r.Now
	}
	if every <= 0 {
		every = DefaultTrimEvery
	}
	r.mu.Lock()
	last, seen := r.trims[nn]
	r.mu.Unlock()
	due := !seen || (ended && !last.ended) || (!ended && now().Sub(last.at) >= every)
	if due {
		removed, err := r.Store.Trim(ctx, key, ret.Bytes())
		if err != nil {
			logf.FromContext(ctx).Info("Could not trim the run stream", "run", key.String(), "error", err.Error())
			return requeueWithin(res, every)
		}
		if removed > 0 {
			logf.FromContext(ctx).V(1).Info("Trimmed the run stream", "run", key.String(),
				"removed", removed, "maxBytes", ret.Bytes())
		}
		last = trimmed{at: now(), ended: ended}
		r.mu.Lock()
		if r.trims == nil {
			r.trims = map[types.NamespacedName]trimmed{}
		}
		r.trims[nn] = last
		r.mu.Unlock()
	}
	if ended {
		return res
	}
	return requeueWithin(res, last.at.Add(every).Sub(now()))
}

// requeueWithin makes res requeue after at most d.
func requeueWithin(res ctrl.Result, d time.Duration) ctrl.Result {
	d = max(d, time.Millisecond)
	if res.RequeueAfter <= 0 || d < res.RequeueAfter {
		res.RequeueAfter = d
	}
	return res
}

// endWait is how long the end event of evs (if it ends with one) should
// wait for the gateways' last events; 0 to publish it now.
func (r *Reconciler) endWait(ctx context.Context, key stream.RunKey, run *v1alpha1.ResearchRun, evs []stream.Event) time.Duration {
	if t := evs[len(evs)-1].Type; t != stream.RunFinished && t != stream.RunError {
		return 0
	}
	now, quiet, maxWait := time.Now, r.Quiet, r.MaxEndWait
	if r.Now != nil {
		now = r.Now
	}
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	if maxWait <= 0 {
		maxWait = DefaultMaxEndWait
	}
	if ct := run.Status.CompletionTime; ct != nil && now().Sub(ct.Time) >= maxWait {
		return 0
	}
	last, stored, ok, err := r.Store.Last(ctx, key)
	if err != nil || !ok || runstate.FromStatus(last) {
		return 0
	}
	if idle := now().Sub(stored); idle < quiet {
		return quiet - idle
	}
	return 0
}

// checkpoint returns the run's checkpoint: from memory, else from the
// bucket, caught up with the events stored after it. A checkpoint is of one
// run UID: one of a deleted run of the same name is not this run's.
func (r *Reconciler) checkpoint(ctx context.Context, nn types.NamespacedName, key stream.RunKey) (runstate.Checkpoint, error) {
	r.mu.Lock()
	cp, ok := r.mem[nn]
	r.mu.Unlock()
	if ok && cp.RunUID == key.UID {
		return cp, nil
	}
	cp = runstate.Checkpoint{RunUID: key.UID}
	if r.KV != nil {
		e, err := r.KV.Get(ctx, kvKey(key))
		switch {
		case err == nil:
			if err := json.Unmarshal(e.Value(), &cp); err != nil || cp.RunUID != key.UID {
				cp = runstate.Checkpoint{RunUID: key.UID}
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return cp, fmt.Errorf("checkpoint of %s: %w", key, err)
		}
	}
	err := r.Store.Replay(ctx, key, cp.Seq+1, func(ev stream.Event) error {
		cp = runstate.Fold(cp, ev)
		return nil
	})
	if err != nil {
		return cp, err
	}
	r.remember(nn, cp)
	return cp, nil
}

// remember keeps the run's checkpoint in memory.
func (r *Reconciler) remember(nn types.NamespacedName, cp runstate.Checkpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		r.mem = map[types.NamespacedName]runstate.Checkpoint{}
	}
	r.mem[nn] = cp
}

func (r *Reconciler) save(ctx context.Context, nn types.NamespacedName, key stream.RunKey, cp runstate.Checkpoint) {
	r.remember(nn, cp)
	if r.KV == nil {
		return
	}
	b, _ := json.Marshal(cp)
	if _, err := r.KV.Put(ctx, kvKey(key), b); err != nil {
		// The events are stored; a restart catches up from the older
		// checkpoint by replaying them.
		logf.FromContext(ctx).Info("Could not save the run stream checkpoint", "error", err.Error())
	}
}

// forget drops a deleted run's checkpoint; its events stay until retention
// removes them, and are never read again: a run created again under the
// name is another UID, another subject.
func (r *Reconciler) forget(ctx context.Context, nn types.NamespacedName) {
	r.mu.Lock()
	cp, known := r.mem[nn]
	delete(r.mem, nn)
	delete(r.trims, nn)
	r.mu.Unlock()
	if r.KV == nil {
		return
	}
	key := stream.RunKey{Namespace: nn.Namespace, Name: nn.Name}
	_ = r.KV.Delete(ctx, kvKey(key))
	if known && cp.RunUID != "" {
		key.UID = cp.RunUID
		_ = r.KV.Delete(ctx, kvKey(key))
	}
}

// kvKey is the run's key in the bucket: its subject's tokens, the UID's
// included. (Earlier versions keyed checkpoints by namespace and name, of
// streams keyed the same way; forget removes such a key too.)
func kvKey(run stream.RunKey) string {
	k := store.EscapeToken(run.Namespace) + "." + store.EscapeToken(run.Name)
	if run.UID != "" {
		k += "." + store.EscapeToken(run.UID)
	}
	return k
}
