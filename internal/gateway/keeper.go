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

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// A keeper is the gateway's hold on one attempt: the attempt's spec as last
// seen (grant, phase, mode, directives, approvals) and its facts, of which the
// gateway is the only author. Facts are kept in memory (the source of truth
// for what RunAttempt status says) and written:
//   - coalesced: the first fact after a write arms a timer of FlushInterval;
//     every fact until it fires rides on the same write;
//   - at once ("urgent"): write-ahead records, awaited approvals, finish,
//     settlement and escalations, whose callers wait until they are durable.
//
// A conflict re-reads the RunAttempt and re-applies the facts; any other
// failure keeps them dirty and retries on the next interval, so an accepted
// fact is never dropped. A request waiting for an urgent fact to be durable
// is answered (not_persisted) as soon as a write that carried it failed: the
// fact stays to be written, but the caller is not kept waiting on an API
// server that may be gone for long. A restarted gateway seeds a new keeper from the
// RunAttempt status: at most one flush interval of coalesced counts is lost,
// never a write-ahead record.
type keeper struct {
	g   *Gateway
	key types.NamespacedName
	log logr.Logger

	mu  sync.Mutex
	obj *v1alpha1.RunAttempt // metadata and spec; status is never read back after seeding
	// pod is obj's spec.podUID, read without mu: every request of the
	// attempt checks it first (resolve), and under load that check was
	// the queue on mu (docs/benchmarks-gateway.md).
	pod    atomic.Pointer[string]
	facts  facts
	tokens int64 // tokens reserved by model requests under way
	// cost is the cost reserved by model requests under way.
	cost v1alpha1.Money
	// baseSeq is the version of the facts that recorded the finalize base
	// (facts.finalizeBase): nothing is dispatched under the reserve before
	// it is durable.
	baseSeq uint64
	// exhaustedSeq is the version of the facts that recorded the grant's
	// exhaustion (facts.grantExhausted).
	exhaustedSeq uint64
	calls        map[string]*admitted
	// approvalSince is when each pending approval request was first made
	// (its expiry runs from there, across reports of the same call, and
	// across a restart of the gateway: seeded from status.awaitingApproval).
	approvalSince map[string]time.Time
	// conv fingerprints the conversation the last model request forwarded:
	// the context of the tool calls that follow it.
	conv string
	// prompts are the latest answered model requests' shapes and charges,
	// which bound the prompt of a request that extends one (reservation.go).
	prompts []promptMemory
	// chain is the policy's interceptor chain (built on the first tool
	// call: the snapshot does not change within an attempt), or chainErr.
	chain    *chain.Chain
	chainErr error
	seq      uint64 // version of the facts
	written  uint64 // latest version durably written
	// liveReadAt is when the attempt was last read live for a waiting
	// approval (refreshLive), at most once per liveReadPolls polls.
	liveReadAt time.Time
	// persisted is the status as this keeper last wrote it (or read it on
	// takeover): a write that would say nothing new is skipped, and a
	// refusal on the grant waits only while the counts differ from it.
	persisted v1alpha1.RunAttemptStatus
	failed    uint64 // latest version a write was tried for and failed
	dirty     bool
	deleted   bool
	armed     bool
	flush     clock.Timer
	lastSeen  time.Time // when the agent last called (or a call of it ended), its heartbeat
	beatAt    time.Time // the heartbeat last written (without a Lease)
	// live is the attempt's liveness fact as this keeper knows it, written
	// with every write (see Liveness); open counts the attempt's requests
	// under way and open watches; silence is the check of when the attempt
	// goes silent, armed while nothing is open.
	live         *v1alpha1.AttemptLiveness
	liveSeen     *v1alpha1.AttemptLiveness // as last read from the API server
	open         int
	busy         int // model requests and tool calls under way (enter)
	silence      clock.Timer
	silenceArmed bool
	lastErr      error
	rev          uint64 // version of the agent's view
	wake         chan struct{}
	kick         chan struct{}
	active       time.Time // last request, for retiring idle keepers
	// proposed ties the attempt's tool calls to its model's proposals
	// of them, for the run stream; streamMeta is its events' metadata
	// (made once: every model stream chunk is an event).
	proposed   proposals
	streamMeta json.RawMessage
	// streamBudget bounds the bytes the attempt streams in this gateway:
	// its policy's spec.events.maxBytes.
	streamBudget stream.Budget
	// kids are the run's child runs as last read (children.go): a carve
	// whose child is seen ended is spent only as far as the child used it.
	kids []lifecycle.ChildView
}

// admitted is a tool call the gateway admitted and awaits the outcome of.
type admitted struct {
	tool string
	// section and content are a publication call's arguments: what was
	// approved is what may be published.
	section, content string
}

func newKeeper(g *Gateway, obj *v1alpha1.RunAttempt) *keeper {
	k := &keeper{
		g:     g,
		key:   types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name},
		log:   g.log.WithValues("runattempt", obj.Namespace+"/"+obj.Name),
		calls: map[string]*admitted{},

		approvalSince: map[string]time.Time{},
		wake:          make(chan struct{}),
		kick:          make(chan struct{}, 1),
	}
	k.facts.seed(obj.Status)
	k.persisted = *obj.Status.DeepCopy()
	for _, a := range obj.Status.AwaitingApproval {
		if a.RequestedAt != nil {
			k.approvalSince[a.ActionID] = a.RequestedAt.Time
		}
	}
	restarted := false
	// A side effect in flight when the previous gateway process ended has
	// an outcome nobody knows: it is never dispatched again (unless its
	// tool is idempotent). The agent API's outcome report may still settle
	// it.
	for i := range k.facts.inFlight {
		if r := &k.facts.inFlight[i]; r.Outcome == "" {
			r.Outcome = v1alpha1.OutcomeUnknown
			r.Message = "in flight when the gateway that dispatched it stopped"
			restarted = true
		}
	}
	if hb := obj.Status.HeartbeatTime; hb != nil {
		k.lastSeen, k.beatAt = hb.Time, hb.Time
	}
	k.live, k.liveSeen = obj.Status.Liveness.DeepCopy(), obj.Status.Liveness.DeepCopy()
	k.obj = obj.DeepCopy()
	k.obj.Status = v1alpha1.RunAttemptStatus{}
	k.pod.Store(new(k.obj.Spec.PodUID))
	k.noteFinalizingLocked()
	k.active = g.clock.Now()
	if restarted {
		k.markLocked(true) // written as soon as the keeper runs
	}
	return k
}

// podUID is the UID of the pod the attempt records (g.mu may be held; k.mu
// is not taken).
func (k *keeper) podUID() string { return *k.pod.Load() }

// noteFinalizingLocked records the usage the reserve is served on top of,
// the first time the spec says Finalizing with a reserve: a fact, written at
// once and taken over by a restarted gateway, so the reserve is served once.
func (k *keeper) noteFinalizingLocked() {
	g := k.obj.Spec.Grant
	if !g.FinalizeOnly || g.Reserve == nil || k.facts.finalizeBase != nil {
		return
	}
	// The base is in the counters the grant is in: usage plus carves.
	base := k.facts.usage
	spend := k.childSpendLocked(g)
	base.ModelRequests, base.ToolCalls = base.ModelRequests+spend.ModelRequests, base.ToolCalls+spend.ToolCalls
	base.Tokens, base.Cost = base.Tokens+spend.Tokens, base.Cost+spend.Cost
	k.facts.finalizeBase = &base
	k.markLocked(true)
	k.baseSeq = k.seq
}

// baseUnwrittenLocked is the version to wait for before dispatching under
// the grant: the finalize base's, until it is durable; else 0.
func (k *keeper) baseUnwrittenLocked() uint64 {
	if k.baseSeq > k.written {
		return k.baseSeq
	}
	return 0
}

// grantLocked is the grant the gateway enforces (lifecycle.EffectiveGrant).
// What the attempt carved for its children is spent by it until they end.
func (k *keeper) grantLocked() v1alpha1.Grant {
	g := lifecycle.EffectiveGrant(k.obj.Spec.Grant, k.facts.finalizeBase)
	return lifecycle.LessChildren(g, k.childSpendLocked(g))
}

// run writes the facts when they are due, until ctx ends.
func (k *keeper) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.kick:
		}
		_ = k.writeOnce(ctx)
	}
}

func (k *keeper) signal() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// markLocked records that the facts changed: urgent facts are written at
// once, others within FlushInterval.
func (k *keeper) markLocked(urgent bool) {
	k.seq++
	k.rev++
	k.dirty = true
	k.broadcastLocked()
	if urgent {
		k.signal()
		return
	}
	if !k.armed {
		k.armed = true
		if k.flush != nil {
			k.flush.Stop()
		}
		k.flush = k.g.clock.AfterFunc(k.g.opts.FlushInterval, k.signal)
	}
}

func (k *keeper) broadcastLocked() {
	close(k.wake)
	k.wake = make(chan struct{})
}

// begin records that a request of the agent starts (watch: it opens the
// attempt watch): the agent's heartbeat.
//
// With a Lease (see Liveness) nothing is written for it unless the
// liveness fact changes: this process takes the attempt over (the first
// call it serves, or the first call after another replica took it at least
// a heartbeat interval ago), or the attempt it had found silent speaks
// again. Without a Lease a heartbeat is written (coalesced) when the last
// one written is a third of the heartbeat interval old; a watch is no
// heartbeat then.
func (k *keeper) begin(watch bool) {
	now := k.g.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.active = now
	if !k.g.governs() {
		if watch {
			return
		}
		k.lastSeen = now
		if now.Sub(k.beatAt) >= heartbeatInterval(k.obj.Spec)/3 {
			k.markLocked(false)
		}
		return
	}
	k.lastSeen = now
	k.open++
	k.governLocked(now)
}

// enter takes one of the attempt's places for a model request or tool call
// under way (Options.MaxAttemptConcurrency), or refuses it; leave gives it
// back.
func (k *keeper) enter(call string) *apiError {
	k.mu.Lock()
	e := concurrencyRefusal(k.busy, k.g.opts.MaxAttemptConcurrency)
	if e == nil {
		k.busy++
	}
	k.mu.Unlock()
	if e != nil {
		k.refusal(e, call)
	}
	return e
}

func (k *keeper) leave() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.busy--
}

// end records that a request of the agent ended (or its watch closed).
// Once nothing is open, the attempt is silent if nothing opens within its
// heartbeat interval.
func (k *keeper) end() {
	if !k.g.governs() {
		return
	}
	now := k.g.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.open--
	k.lastSeen = now
	if k.open == 0 {
		k.armSilenceLocked(now)
	}
}

// governLocked takes the attempt's liveness over when the agent calls this
// process, and clears silentSince when it calls again after silence.
func (k *keeper) governLocked(now time.Time) {
	if k.stoppedLocked() != nil {
		return // an ended attempt needs no liveness
	}
	switch lv := k.live; {
	case k.g.holds(lv):
		if lv.SilentSince == nil {
			return
		}
		lv.SilentSince = nil
		k.log.V(1).Info("Attempt speaks again")
	case lv != nil && lv.Gateway != k.g.leaseRef() && now.Sub(lv.Since.Time) < heartbeatInterval(k.obj.Spec):
		// Another replica took it less than an interval ago: requests
		// balanced between replicas cost at most one takeover per interval.
		return
	default:
		k.live = &v1alpha1.AttemptLiveness{
			Gateway: k.g.leaseRef(), Holder: k.g.opts.Liveness.Identity, Since: metav1.NewTime(now),
		}
		k.log.V(1).Info("Governing attempt liveness", "previous", lv)
	}
	k.markLocked(false)
}

// armSilenceLocked schedules the silence check for a heartbeat interval
// after the agent was last seen.
func (k *keeper) armSilenceLocked(now time.Time) {
	if k.silenceArmed {
		return
	}
	k.silenceArmed = true
	k.silence = k.g.clock.AfterFunc(max(k.lastSeen.Add(heartbeatInterval(k.obj.Spec)).Sub(now), 0), k.checkSilence)
}

// checkSilence writes silentSince (when the agent was last seen, rounded up
// to the second) once this
// process, governing the attempt, has not seen it for a heartbeat interval:
// nothing under way, no watch open. One write per silence; the operator
// counts the heartbeat timeout from it.
func (k *keeper) checkSilence() {
	now := k.g.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.silenceArmed = false
	if k.open > 0 || !k.g.holds(k.live) || k.live.SilentSince != nil || k.stoppedLocked() != nil {
		return
	}
	if now.Sub(k.lastSeen) < heartbeatInterval(k.obj.Spec) {
		k.armSilenceLocked(now)
		return
	}
	// Whole seconds, rounded up: the timeout never counts from before the
	// agent was last seen.
	t := metav1.NewTime(k.lastSeen.Truncate(time.Second))
	if t.Before(&metav1.Time{Time: k.lastSeen}) {
		t = metav1.NewTime(t.Add(time.Second))
	}
	k.live.SilentSince = &t
	k.log.V(1).Info("Attempt went silent", "lastSeen", k.lastSeen)
	k.markLocked(false)
}

// observeLivenessLocked takes the liveness fact of a RunAttempt read from
// the API server when another process wrote it since this keeper last read
// it: that process took the attempt over, and this keeper's writes then
// carry its fact, not a stale claim of this one's.
func (k *keeper) observeLivenessLocked(lv *v1alpha1.AttemptLiveness) {
	if lv == nil || equality.Semantic.DeepEqual(lv, k.liveSeen) {
		return // nothing written since: a claim of this keeper not yet written stands
	}
	k.liveSeen = lv.DeepCopy()
	if !k.g.holds(lv) {
		k.live = lv.DeepCopy()
	}
}

// writeOnce writes the facts if they changed, retrying conflicts by re-reading
// the RunAttempt (live) and re-applying the facts.
func (k *keeper) writeOnce(ctx context.Context) error {
	for try := 0; ; try++ {
		k.mu.Lock()
		if k.deleted || !k.dirty {
			k.mu.Unlock()
			return nil
		}
		obj := k.obj.DeepCopy()
		seq := k.seq
		obj.Status = k.facts.render()
		obj.Status.ObservedGeneration = obj.Generation
		beat := k.lastSeen
		if !beat.IsZero() {
			obj.Status.HeartbeatTime = &metav1.Time{Time: beat}
		}
		obj.Status.Liveness = k.live.DeepCopy()
		k.dirty = false
		k.armed = false
		if k.flush != nil {
			k.flush.Stop()
		}
		if statusUnchanged(&k.persisted, &obj.Status, heartbeatInterval(obj.Spec)/3) {
			// The API server holds all of it already (an agent repeating
			// finish, a heartbeat not yet due): what waits on it is durable.
			k.written = max(k.written, seq)
			k.broadcastLocked()
			k.mu.Unlock()
			k.g.metrics.statusWritesSkipped.Inc()
			return nil
		}
		sent := obj.Status.DeepCopy() // the server's answer rounds times
		k.mu.Unlock()

		start := k.g.clock.Now()
		err := k.g.opts.Client.Status().Update(ctx, obj)
		k.g.metrics.statusWrites.WithLabelValues(writeResult(err)).Inc()
		k.g.metrics.statusWriteSeconds.Observe(k.g.clock.Since(start).Seconds())
		if err == nil {
			k.applySpec(obj)
			k.mu.Lock()
			if seq > k.written {
				k.written, k.persisted = seq, *sent
			}
			k.beatAt = beat
			k.lastErr = nil
			k.broadcastLocked()
			k.mu.Unlock()
			return nil
		}

		k.mu.Lock()
		k.dirty = true // not written: the facts stay to be written
		k.mu.Unlock()
		if apierrors.IsNotFound(err) {
			k.markDeleted()
			return err
		}
		if apierrors.IsConflict(err) && try < k.g.opts.MaxConflictRetries {
			fresh := &v1alpha1.RunAttempt{}
			gerr := k.g.opts.APIReader.Get(ctx, k.key, fresh)
			if gerr == nil {
				k.applySpec(fresh)
				continue
			}
			if apierrors.IsNotFound(gerr) {
				k.markDeleted()
				return gerr
			}
			err = gerr
		}
		k.log.Error(err, "Could not write RunAttempt status; facts kept for the next interval")
		k.mu.Lock()
		k.lastErr = err
		k.failed = max(k.failed, seq)
		k.markLocked(false) // re-arm the flush timer (and wake the waiters)
		k.mu.Unlock()
		return err
	}
}

// statusUnchanged reports whether next says nothing that written (the status
// last written) does not: every fact equal, and the heartbeat less than
// beatEvery newer (a heartbeat is written once it is that old).
func statusUnchanged(written, next *v1alpha1.RunAttemptStatus, beatEvery time.Duration) bool {
	if b := next.HeartbeatTime; b != nil && (written.HeartbeatTime == nil || b.Sub(written.HeartbeatTime.Time) >= beatEvery) {
		return false
	}
	a, b := written.DeepCopy(), next.DeepCopy()
	a.HeartbeatTime, b.HeartbeatTime = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

func writeResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsConflict(err):
		return "conflict"
	}
	return "error"
}

// waitWritten waits until the facts of version target are durable. It fails
// once a write that carried them failed (they stay to be written later).
func (k *keeper) waitWritten(ctx context.Context, target uint64) error {
	for {
		k.mu.Lock()
		switch {
		case k.written >= target:
			k.mu.Unlock()
			return nil
		case k.deleted:
			k.mu.Unlock()
			return fmt.Errorf("RunAttempt %s was deleted", k.key)
		case k.failed >= target:
			err := k.lastErr
			k.mu.Unlock()
			return fmt.Errorf("the API server did not take the write: %w", err)
		}
		ch, lastErr := k.wake, k.lastErr
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("%w (last write error: %v)", context.Cause(ctx), lastErr)
			}
			return context.Cause(ctx)
		}
	}
}

// commit records an urgent change made by fn and waits until it is durable.
func (k *keeper) commit(ctx context.Context, fn func()) error {
	k.mu.Lock()
	fn()
	k.markLocked(true)
	target := k.seq
	k.mu.Unlock()
	return k.waitWritten(ctx, target)
}

// record records a coalesced change made by fn.
func (k *keeper) record(fn func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	fn()
	k.markLocked(false)
}

// applySpec takes a newly read RunAttempt's metadata and spec; an older
// resource version than the one held is ignored.
func (k *keeper) applySpec(obj *v1alpha1.RunAttempt) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.obj != nil && olderRV(obj.ResourceVersion, k.obj.ResourceVersion) {
		return
	}
	changed := k.obj == nil || !equality.Semantic.DeepEqual(k.obj.Spec, obj.Spec)
	k.observeLivenessLocked(obj.Status.Liveness)
	// A recorded finalize base is a fact that wins over one this keeper
	// noted but could not write (it was seeded from a stale copy): nothing
	// was dispatched under its own before it was durable.
	if b := obj.Status.FinalizeBase; b != nil && (k.facts.finalizeBase == nil || *b != *k.facts.finalizeBase) {
		k.facts.finalizeBase = b.DeepCopy()
	}
	k.obj = obj.DeepCopy()
	k.obj.Status = v1alpha1.RunAttemptStatus{}
	k.pod.Store(new(k.obj.Spec.PodUID))
	k.noteFinalizingLocked()
	if changed {
		k.rev++
	}
	k.broadcastLocked()
}

func (k *keeper) markDeleted() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.deleted = true
	k.rev++
	k.broadcastLocked()
}

// refresh re-reads the RunAttempt from the gateway's reader (its cache): a
// safety net for a missed informer event.
func (k *keeper) refresh(ctx context.Context) {
	fresh := &v1alpha1.RunAttempt{}
	err := k.g.opts.Client.Get(ctx, k.key, fresh)
	switch {
	case err == nil:
		k.applySpec(fresh)
		k.refreshChildren(ctx)
	case apierrors.IsNotFound(err):
		k.markDeleted()
	}
}

// liveReadPolls spaces an attempt's live reads for its waiting approvals:
// however many calls wait, one GET per attempt per liveReadPolls poll
// intervals (10 s by default; between them the cache is read), so waits do
// not crowd the gateway's client limiter that its urgent writes share.
const liveReadPolls = 5

// refreshLive re-reads the RunAttempt from the API server, for a wait whose
// answer is a human's (an approval): after an API server restart the
// informer may relist only after its back-off (up to a minute), and the
// approval must not wait for it. A deletion is left to the informer: a
// restarting API server answers 404 for a custom resource it is not yet
// serving.
func (k *keeper) refreshLive(ctx context.Context) {
	now := k.g.clock.Now()
	k.mu.Lock()
	due := now.Sub(k.liveReadAt) >= liveReadPolls*k.g.opts.PollInterval
	if due {
		k.liveReadAt = now
	}
	k.mu.Unlock()
	if !due {
		k.refresh(ctx)
		return
	}
	fresh := &v1alpha1.RunAttempt{}
	if err := k.g.opts.APIReader.Get(ctx, k.key, fresh); err == nil {
		k.applySpec(fresh)
	}
}

// stoppedLocked says why nothing more is served, or nil.
func (k *keeper) stoppedLocked() *apiError {
	spec := k.obj.Spec
	switch {
	case k.deleted:
		return errRunTerminated(fmt.Sprintf("RunAttempt %s no longer exists; nothing more is served", k.key))
	case spec.RunPhase == v1alpha1.PhaseTerminated:
		return errRunTerminated(fmt.Sprintf("run %s is Terminated; attempt %d is served nothing more", spec.RunName, spec.Attempt))
	case spec.Superseded:
		return errSuperseded(fmt.Sprintf("attempt %d of run %s was superseded by a newer attempt; it is served nothing more",
			spec.Attempt, spec.RunName))
	}
	return nil
}

// view renders the agent's view of the attempt.
func (k *keeper) view() gatewayapi.Attempt {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.viewLocked()
}

func (k *keeper) viewLocked() gatewayapi.Attempt {
	spec := k.obj.Spec
	v := gatewayapi.Attempt{
		Namespace: k.key.Namespace, Run: spec.RunName, RunAttempt: k.key.Name, Attempt: spec.Attempt,
		Goal: spec.Goal, Phase: spec.RunPhase, Finalizing: isFinalizing(spec), Superseded: spec.Superseded,
		Mode: spec.Mode, Grant: k.grantLocked(), Used: k.facts.usage,
		Directives: slices.Clone(spec.Directives), Deadline: spec.Deadline,
		HeartbeatSeconds: int64(heartbeatInterval(spec) / time.Second),
		Policy:           spec.Policy.Name, Tools: slices.Clone(spec.Policy.Tools),
		Chain: slices.Clone(spec.Policy.ResolvedChain), AutoApprove: slices.Clone(spec.Policy.AutoApprove),
		Approvals: slices.Clone(spec.Approvals), AwaitingApproval: v1alpha1.ActionIDs(k.facts.awaiting),
		Advice: slices.Clone(k.facts.advice),
		Steps:  k.facts.stepCount(), LastProgressStep: k.facts.lastProgressStep,
		FinishProposed: k.facts.finishProposed, Publication: k.facts.publication,
		Checkpoint: k.facts.checkpoint, Revision: k.rev,
	}
	if k.deleted {
		v.Phase = v1alpha1.PhaseTerminated
	}
	if h := spec.Policy.Harness; h != nil {
		v.HarnessDisallowedTools = slices.Clone(h.DisallowedTools)
	}
	for _, m := range spec.Policy.Models {
		v.Models = append(v.Models, m.Name)
	}
	return v
}

// settledIdle reports whether the keeper can be retired: the attempt is over,
// every fact is durable and nobody called for idle.
func (k *keeper) settledIdle(now time.Time, idle time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	over := k.deleted || k.obj.Spec.RunPhase == v1alpha1.PhaseTerminated || k.obj.Spec.Superseded
	return over && !k.dirty && k.written >= k.seq && now.Sub(k.active) >= idle
}

func isFinalizing(spec v1alpha1.RunAttemptSpec) bool {
	return spec.RunPhase == v1alpha1.PhaseFinalizing || spec.Grant.FinalizeOnly
}

// DefaultHeartbeatInterval is used when the RunAttempt sets none.
const DefaultHeartbeatInterval = 10 * time.Second

func heartbeatInterval(spec v1alpha1.RunAttemptSpec) time.Duration {
	if spec.HeartbeatInterval != nil && spec.HeartbeatInterval.Duration > 0 {
		return spec.HeartbeatInterval.Duration
	}
	return DefaultHeartbeatInterval
}

// olderRV reports whether resource version rv is older than cur, when both
// are the integers the API server uses in practice.
func olderRV(rv, cur string) bool {
	x, err1 := strconv.ParseUint(rv, 10, 64)
	y, err2 := strconv.ParseUint(cur, 10, 64)
	return err1 == nil && err2 == nil && x < y
}
