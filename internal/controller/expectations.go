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
