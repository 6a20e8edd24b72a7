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

package stream

import (
	"encoding/json"
	"fmt"

	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// EventBudgetExceeded names the CUSTOM event a producer emits, once, when a
// run's stream goes over its byte budget.
const EventBudgetExceeded = "agentrun.dev/stream-budget-exceeded"

// BudgetFinalBytes bounds a final event's content (a tool result) once its
// run is over its byte budget.
const BudgetFinalBytes = 1024

// Budget bounds the bytes (Event.Size) one producer streams for one run, so
// that one run cannot fill the store and evict other runs' history (the
// store's byte limit is stream-wide: the oldest events of every run go
// first). Within Max every event passes. Past it, deltas are dropped, finals
// still pass with their content cut to BudgetFinalBytes, and the first event
// past it is preceded by a CUSTOM EventBudgetExceeded saying so. Max <= 0
// is no bound. The zero Budget is unbounded; it is not safe for concurrent
// use.
type Budget struct {
	Max int64

	used    int64
	over    bool
	dropped int64
}

// Admit returns what to stream for ev: ev; nothing (a delta past the
// budget); or ev cut, after the marker the first time.
func (b *Budget) Admit(ev Event) []Event {
	size := int64(ev.Size())
	if b.Max <= 0 || (!b.over && b.used+size <= b.Max) {
		b.used += size
		return []Event{ev}
	}
	var out []Event
	if !b.over {
		b.over = true
		v, _ := json.Marshal(map[string]any{
			"maxBytes": b.Max, "streamed": b.used,
			"message": fmt.Sprintf("this run's stream is over its budget of %d bytes (its RuntimePolicy's spec.events.maxBytes): "+
				"from here text, reasoning and tool-argument deltas are dropped, and results are cut to %d bytes", b.Max, BudgetFinalBytes),
		})
		out = append(out, Event{Type: Custom, Name: EventBudgetExceeded, Value: v})
	}
	if ev.IsDelta() {
		b.dropped++
		return out
	}
	ev.Content = textutil.Truncate(ev.Content, BudgetFinalBytes)
	return append(out, ev)
}

// Dropped is how many deltas Admit has dropped.
func (b *Budget) Dropped() int64 { return b.dropped }
