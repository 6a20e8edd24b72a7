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
	"errors"
	"sync"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// hubs fans each run's live events out to its subscribers in this process:
// one store subscription (one JetStream consumer) per run, however many
// clients read it. A subscriber that resumes from further back reads the
// gap from the store (a short-lived replay), then joins the live tail.
type hubs struct {
	src Source
	// pendingBytes bounds the live events kept for a subscriber while it
	// catches up (beyond it the subscriber is told to reconnect).
	pendingBytes int

	mu sync.Mutex
	m  map[stream.RunKey]*hub
}

// hub is one run's live tail and its members.
type hub struct {
	run    stream.RunKey
	ready  chan struct{} // closed once started (or failed to)
	cancel context.CancelFunc
	refs   int // under hubs.mu

	mu      sync.Mutex
	last    uint64 // seq of the last event broadcast (or where the hub began)
	err     error  // why the hub ended; set once
	members map[*member]struct{}
}

// member is one subscriber of a hub.
type member struct {
	q *Queue
	// last is the seq of the last event pushed to q. While catching is
	// set, only the catch-up goroutine touches it; then the hub does.
	last     uint64
	catching bool
	pending  []stream.Event
	pendSize int
}

var errHubClosed = errors.New("the run's live tail ended")

// join makes q receive the run's events after seq after, in order, each
// once: from the store up to the live tail, then live. It returns the
// function that leaves.
func (hs *hubs) join(ctx context.Context, run stream.RunKey, after uint64, q *Queue) (func(), error) {
	h := hs.acquire(run)
	m := &member{q: q, last: after}
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		hs.release(h)
		return nil, h.err
	}
	upTo := h.last
	m.catching = after < upTo
	h.members[m] = struct{}{}
	h.mu.Unlock()
	if m.catching {
		go hs.catchUp(ctx, h, m, upTo)
	}
	return func() {
		h.mu.Lock()
		delete(h.members, m)
		h.mu.Unlock()
		hs.release(h)
	}, nil
}

var errCaughtUp = errors.New("caught up")

// catchUp pushes the stored events after m.last up to upTo, then what the
// hub kept meanwhile, and makes m live.
func (hs *hubs) catchUp(ctx context.Context, h *hub, m *member, upTo uint64) {
	err := hs.src.Replay(ctx, h.run, m.last+1, func(ev stream.Event) error {
		if ev.Seq > upTo {
			return errCaughtUp
		}
		if ev.Seq <= m.last {
			return nil
		}
		if !m.q.Push(ev) {
			return errOverflow
		}
		m.last = ev.Seq
		return nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case errors.Is(err, errOverflow):
		delete(h.members, m)
		return
	case err != nil && !errors.Is(err, errCaughtUp):
		delete(h.members, m)
		m.q.Close(err)
		return
	}
	for _, ev := range m.pending {
		if ev.Seq <= m.last {
			continue
		}
		if !m.q.Push(ev) {
			delete(h.members, m)
			return
		}
		m.last = ev.Seq
	}
	m.pending, m.pendSize, m.catching = nil, 0, false
}

var errOverflow = errors.New("the subscriber's queue overflowed")

// acquire returns the run's hub, starting it if there is none; a hub that
// failed to start has its err set.
func (hs *hubs) acquire(run stream.RunKey) *hub {
	hs.mu.Lock()
	h, ok := hs.m[run]
	if !ok {
		h = &hub{run: run, ready: make(chan struct{}), members: map[*member]struct{}{}}
		if hs.m == nil {
			hs.m = map[stream.RunKey]*hub{}
		}
		hs.m[run] = h
		go hs.start(h)
	}
	h.refs++
	hs.mu.Unlock()
	<-h.ready
	return h
}

// release drops a reference; the last one stops the hub.
func (hs *hubs) release(h *hub) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h.refs--; h.refs > 0 {
		return
	}
	if hs.m[h.run] == h {
		delete(hs.m, h.run)
	}
	if h.cancel != nil {
		h.cancel()
	}
}

// start subscribes to the run after its last stored event and broadcasts.
func (hs *hubs) start(h *hub) {
	ctx, cancel := context.WithCancel(context.Background())
	hs.mu.Lock()
	h.cancel = cancel
	hs.mu.Unlock()
	b, err := hs.src.Bounds(ctx, h.run)
	var sub interface {
		Err() error
	}
	var events <-chan stream.Event
	if err == nil {
		h.last = b.Last
		s, serr := hs.src.Subscribe(ctx, h.run, b.Last)
		if err = serr; err == nil {
			sub, events = s, s.C
		}
	}
	if err != nil {
		h.fail(err)
		hs.forget(h)
		close(h.ready)
		cancel()
		return
	}
	close(h.ready)
	for ev := range events {
		h.broadcast(ev, hs.pendingBytes)
	}
	err = sub.Err()
	if err == nil {
		err = errHubClosed
	}
	h.fail(err)
	hs.forget(h)
}

// forget removes a failed hub, so that the next subscriber starts anew.
func (hs *hubs) forget(h *hub) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.m[h.run] == h {
		delete(hs.m, h.run)
	}
}

func (h *hub) broadcast(ev stream.Event, pendingBytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = ev.Seq
	for m := range h.members {
		if m.catching {
			m.pending = append(m.pending, ev)
			if m.pendSize += ev.Size(); m.pendSize > pendingBytes {
				delete(h.members, m)
				m.q.overflow()
			}
			continue
		}
		if ev.Seq <= m.last {
			continue
		}
		if !m.q.Push(ev) {
			delete(h.members, m)
			continue
		}
		m.last = ev.Seq
	}
}

// fail ends every member's queue with err (once).
func (h *hub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	h.err = err
	for m := range h.members {
		m.q.Close(err)
	}
	clear(h.members)
}
