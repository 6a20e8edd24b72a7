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

package sse

import (
	"context"
	"sync"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// Queue is one subscriber's bounded queue. Push never blocks: when the queue
// is over its bound it merges adjacent deltas of one block (the newest pair
// first); if no pair merges, the queue overflows and stops.
type Queue struct {
	maxEvents, maxBytes int

	mu       sync.Mutex
	items    []stream.Event
	bytes    int
	state    queueState
	err      error
	notify   chan struct{}
	merges   int
	highLen  int
	highSize int
}

type queueState int

const (
	queueOpen queueState = iota
	queueClosed
	queueOverflowed
)

// NewQueue returns a queue bounded to maxEvents events and maxBytes bytes
// (as Event.Size counts them).
func NewQueue(maxEvents, maxBytes int) *Queue {
	return &Queue{maxEvents: max(1, maxEvents), maxBytes: max(1, maxBytes), notify: make(chan struct{}, 1)}
}

// Push adds ev. It reports false once the queue has overflowed (or was
// closed): then nothing more is accepted.
func (q *Queue) Push(ev stream.Event) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != queueOpen {
		return false
	}
	q.items = append(q.items, ev)
	q.bytes += ev.Size()
	for len(q.items) > q.maxEvents || q.bytes > q.maxBytes {
		if !q.mergeOne() {
			q.state = queueOverflowed
			q.items, q.bytes = nil, 0
			q.wake()
			return false
		}
		q.merges++
	}
	q.highLen = max(q.highLen, len(q.items))
	q.highSize = max(q.highSize, q.bytes)
	q.wake()
	return true
}

func (q *Queue) mergeOne() bool {
	for i := len(q.items) - 1; i > 0; i-- {
		if merged, ok := stream.Merge(q.items[i-1], q.items[i]); ok {
			q.bytes -= q.items[i-1].Size() + q.items[i].Size()
			q.bytes += merged.Size()
			q.items[i-1] = merged
			q.items = append(q.items[:i], q.items[i+1:]...)
			return true
		}
	}
	return false
}

func (q *Queue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// overflow discards the queue as if it had overflowed: the subscriber is
// told to reconnect.
func (q *Queue) overflow() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == queueOpen {
		q.state = queueOverflowed
		q.items, q.bytes = nil, 0
	}
	q.wake()
}

// Close marks the end of the source: Next returns what is queued, then
// ErrClosed's state. err, if not nil, is why the source ended.
func (q *Queue) Close(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == queueOpen {
		q.state, q.err = queueClosed, err
	}
	q.wake()
}

// Result of Next.
type Result int

const (
	// Got: an event.
	Got Result = iota
	// Idle: nothing arrived within the wait (time for a keepalive).
	Idle
	// Ended: the source closed and the queue is drained; see Err.
	Ended
	// Overflowed: the queue overflowed; its contents are gone.
	Overflowed
	// Cancelled: ctx ended.
	Cancelled
)

// Next returns the oldest event, waiting up to wait for one.
func (q *Queue) Next(ctx context.Context, wait time.Duration) (stream.Event, Result) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		q.mu.Lock()
		switch {
		case q.state == queueOverflowed:
			q.mu.Unlock()
			return stream.Event{}, Overflowed
		case len(q.items) > 0:
			ev := q.items[0]
			q.items[0] = stream.Event{}
			q.items = q.items[1:]
			q.bytes -= ev.Size()
			q.mu.Unlock()
			return ev, Got
		case q.state == queueClosed:
			q.mu.Unlock()
			return stream.Event{}, Ended
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return stream.Event{}, Cancelled
		case <-timer.C:
			return stream.Event{}, Idle
		case <-q.notify:
		}
	}
}

// Err is why the source ended, if it failed.
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// QueueStats are a queue's current and highest length and size, and how
// many merges it made.
type QueueStats struct {
	Len, Bytes, HighLen, HighBytes, Merges int
}

// Stats returns the queue's statistics.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueStats{Len: len(q.items), Bytes: q.bytes, HighLen: q.highLen, HighBytes: q.highSize, Merges: q.merges}
}

func (s QueueStats) fold(o QueueStats) QueueStats {
	return QueueStats{
		HighLen:   max(s.HighLen, o.HighLen),
		HighBytes: max(s.HighBytes, o.HighBytes),
		Merges:    s.Merges + o.Merges,
	}
}
