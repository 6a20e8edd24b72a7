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

package agent

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The fact writer. Facts are recorded locally (the source of truth) and
// written to the RunAttempt status:
//   - coalesced: the first fact after a write arms a timer of FlushInterval;
//     every fact recorded until it fires rides on the same write, so there
//     is at most one coalesced write per interval;
//   - at once ("urgent"): write-ahead records, awaited approvals, finish,
//     settlement and escalations kick the writer immediately;
//   - heartbeats: every write stamps heartbeatTime; when nothing was written
//     for spec.heartbeatInterval, a heartbeat write is made.
// A conflict re-reads the RunAttempt and re-applies the local facts; any
// other failure keeps the facts dirty and retries on the next interval.
// Waiters (write-ahead, Flush) wait until a write that includes their fact
// succeeded, so while the API server is unreachable new side effects block
// and no fact is dropped.

// markLocked records that the local facts changed. urgent facts are written
// at once; others within FlushInterval.
func (a *Agent) markLocked(urgent bool) {
	a.seq++
	a.dirty = true
	if urgent {
		a.kickLocked()
		return
	}
	a.armLocked()
}

func (a *Agent) kickLocked() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// armLocked arms the flush timer unless it is armed.
func (a *Agent) armLocked() {
	if a.armed || a.aborted {
		return
	}
	a.armed = true
	a.flushTimer = restart(a.clock, a.flushTimer, a.cfg.FlushInterval, a.fire)
}

// restart stops t and returns a new timer calling fn after d. Timers are not
// reused with Reset: a fake clock's AfterFunc timer also sends on its
// channel, which nobody reads, and a second firing would block the clock.
func restart(c clock.WithDelayedExecution, t clock.Timer, d time.Duration, fn func()) clock.Timer {
	if t != nil {
		t.Stop()
	}
	return c.AfterFunc(d, fn)
}

func (a *Agent) armFlush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armLocked()
}

func (a *Agent) disarmLocked() {
	if a.armed && a.flushTimer != nil {
		a.flushTimer.Stop()
	}
	a.armed = false
}

func (a *Agent) resetHeartbeatLocked() {
	if a.aborted {
		return
	}
	a.hbTimer = restart(a.clock, a.hbTimer, a.hbInterval, a.heartbeat)
}

// fire and heartbeat run on timer callbacks (with a fake clock, inside
// Step): they only signal the write loop.
func (a *Agent) fire() {
	select {
	case a.due <- struct{}{}:
	default:
	}
}

func (a *Agent) heartbeat() {
	a.hbDue.Store(true)
	a.fire()
}

func (a *Agent) writeLoop(ctx context.Context) {
	defer a.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-a.due:
		}
		if ctx.Err() != nil {
			return
		}
		_ = a.writeOnce(ctx)
		if a.outbox.total() > 0 {
			a.resend(ctx)
			if a.outbox.total() > 0 {
				a.armFlush()
			}
		}
	}
}

// writeOnce writes the local facts if they changed or a heartbeat is due,
// retrying conflicts by re-reading the RunAttempt and re-applying the facts.
func (a *Agent) writeOnce(ctx context.Context) error {
	for try := 0; ; try++ {
		a.mu.Lock()
		if a.aborted || a.deleted || (!a.dirty && !a.hbDue.Load()) {
			a.mu.Unlock()
			return nil
		}
		obj := a.obj.DeepCopy()
		seq := a.seq
		obj.Status = a.facts.render()
		obj.Status.ObservedGeneration = obj.Generation
		obj.Status.HeartbeatTime = &metav1.Time{Time: a.clock.Now()}
		a.dirty = false
		a.hbDue.Store(false)
		a.disarmLocked()
		a.resetHeartbeatLocked()
		a.mu.Unlock()

		err := a.c.Status().Update(ctx, obj)
		if err == nil {
			a.metrics.writes.WithLabelValues("ok").Inc()
			a.applySpec(obj)
			a.mu.Lock()
			if seq > a.persisted {
				a.persisted = seq
			}
			a.lastErr = nil
			a.broadcastLocked()
			a.mu.Unlock()
			return nil
		}

		a.mu.Lock()
		a.dirty = true // not written: the facts stay to be written
		a.mu.Unlock()
		if apierrors.IsNotFound(err) {
			a.markDeleted()
			return err
		}
		if apierrors.IsConflict(err) && try < a.cfg.MaxConflictRetries {
			a.metrics.writes.WithLabelValues("conflict").Inc()
			fresh := &v1alpha1.RunAttempt{}
			gerr := a.c.Get(ctx, a.key, fresh)
			if gerr == nil {
				a.applySpec(fresh)
				continue
			}
			if apierrors.IsNotFound(gerr) {
				a.markDeleted()
				return gerr
			}
			err = gerr
		}
		a.metrics.writes.WithLabelValues("error").Inc()
		a.log.Error(err, "Could not write RunAttempt status; facts kept for the next interval")
		a.mu.Lock()
		a.lastErr = err
		a.armLocked()
		a.broadcastLocked()
		a.mu.Unlock()
		return err
	}
}

// waitPersisted waits until the facts of version target are written.
func (a *Agent) waitPersisted(ctx context.Context, target uint64) error {
	for {
		a.mu.Lock()
		switch {
		case a.persisted >= target:
			a.mu.Unlock()
			return nil
		case a.deleted:
			a.mu.Unlock()
			return ErrRunAttemptDeleted
		case a.closed || a.aborted:
			a.mu.Unlock()
			return ErrClosed
		case a.bgCancel == nil:
			a.mu.Unlock()
			return ErrNotStarted
		}
		ch := a.wake
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// LastWriteError returns the error of the latest failed status write, or nil
// if the latest write succeeded.
func (a *Agent) LastWriteError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}
