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
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// expectations remembers pods this process created until the cache shows them
// (or a timeout passes), like the Job controller's expectations: while a
// creation is pending, a pod missing from the cache is read live instead of
// being taken as gone or created again.
type expectations struct {
	clock    clock.PassiveClock
	timeout  time.Duration
	mu       sync.Mutex
	inflight map[types.NamespacedName]time.Time
}

func newExpectations(c clock.PassiveClock, timeout time.Duration) *expectations {
	return &expectations{clock: c, timeout: timeout, inflight: map[types.NamespacedName]time.Time{}}
}

func (e *expectations) expect(key types.NamespacedName) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inflight[key] = e.clock.Now()
}

func (e *expectations) observed(key types.NamespacedName) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.inflight, key)
}

func (e *expectations) pending(key types.NamespacedName) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.inflight[key]
	if ok && e.clock.Since(t) > e.timeout {
		delete(e.inflight, key)
		return false
	}
	return ok
}

// createdPods remembers, per run, the UID the API server gave the attempt
// pod this process created (the create's response), until the RunAttempt
// records it in spec.podUID. It is the only proof that a pod with the
// attempt's deterministic name is the operator's: its name, labels,
// annotations and owner reference can all be set by whoever may create pods
// in the namespace, so a pod is recorded as an attempt's only if its UID is
// the one remembered here.
type createdPods struct {
	mu   sync.Mutex
	uids map[types.NamespacedName]createdPod
}

type createdPod struct {
	attempt int32
	uid     types.UID
}

func newCreatedPods() *createdPods {
	return &createdPods{uids: map[types.NamespacedName]createdPod{}}
}

// remember records that this process created attempt n's pod of run, with uid.
func (c *createdPods) remember(run types.NamespacedName, n int32, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids[run] = createdPod{attempt: n, uid: uid}
}

// made reports whether this process created pod uid as attempt n's pod of run.
func (c *createdPods) made(run types.NamespacedName, n int32, uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.uids[run]
	return ok && uid != "" && p.attempt == n && p.uid == uid
}

// forget drops what is remembered for run (its attempt records its pod, or
// the run is gone or has ended).
func (c *createdPods) forget(run types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.uids, run)
}

// recorded drops what is remembered for attempt n of run, whose RunAttempt
// now records its pod.
func (c *createdPods) recorded(run types.NamespacedName, n int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.uids[run]; ok && p.attempt <= n {
		delete(c.uids, run)
	}
}
