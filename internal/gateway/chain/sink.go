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

package chain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// ErrQueueFull is wrapped by the error of an interceptor whose sink's
// queue is full: the interceptor's failure, which its posture handles
// (Allow: counted in agentrun_gateway_interceptor_queue_full_total and
// dropped, or buffered for resending; Deny: the call is refused).
var ErrQueueFull = errors.New("the interceptor's write queue is full")

// sink writes lines to one io.Writer from its own goroutine, so no call
// waits for the writer: a call only puts its line in a bounded queue (a
// channel send that never blocks; no lock of the sink's is taken on a call).
// A line the writer fails to take is written again (every retry) until it is
// taken or a drain gives up: a sink that recovers loses no line it queued.
type sink struct {
	w     io.Writer
	lines chan *[]byte
	retry time.Duration
	log   logr.Logger

	start   sync.Once
	closed  atomic.Bool   // set by drain: enqueue refuses
	sending atomic.Int64  // enqueues between their closed check and their send
	quit    chan struct{} // closed by drain: write what is queued, then end
	stop    chan struct{} // closed when drain's context ends: give up retrying
	done    chan struct{} // closed when the writer goroutine has ended
	once    sync.Once     // closes quit
	halt    sync.Once     // closes stop
}

func newSink(w io.Writer, size int, retry time.Duration, log logr.Logger) *sink {
	return &sink{w: w, lines: make(chan *[]byte, size), retry: retry, log: log,
		quit: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// enqueue hands the line to the writer without waiting for it; a full queue
// (or a drained sink) is an error wrapping ErrQueueFull. The sink owns bp
// afterwards (it returns it to linePool).
func (s *sink) enqueue(bp *[]byte) error {
	s.start.Do(func() { go s.run() })
	s.sending.Add(1)
	defer s.sending.Add(-1)
	if s.closed.Load() {
		linePool.Put(bp)
		return fmt.Errorf("%w: the writer has stopped", ErrQueueFull)
	}
	select {
	case s.lines <- bp:
		return nil
	default:
		linePool.Put(bp)
		return fmt.Errorf("%w (%d lines wait for the writer)", ErrQueueFull, cap(s.lines))
	}
}

func (s *sink) run() {
	defer close(s.done)
	for {
		select {
		case bp := <-s.lines:
			s.take(bp)
		case <-s.quit:
			// closed is set: wait out the enqueues already past their
			// check, then write what they and the others queued.
			for s.sending.Load() > 0 {
				runtime.Gosched()
			}
			for {
				select {
				case bp := <-s.lines:
					s.take(bp)
				default:
					return
				}
			}
		}
	}
}

func (s *sink) take(bp *[]byte) {
	s.write(*bp)
	linePool.Put(bp)
}

// write writes one line, again after every failure until it is taken or
// drain gives up.
func (s *sink) write(line []byte) {
	failing := false
	for {
		n, err := s.w.Write(line)
		if err == nil && n < len(line) {
			err = io.ErrShortWrite
		}
		if err == nil {
			if failing {
				s.log.Info("Audit writer recovered; writing the queued lines", "queued", len(s.lines))
			}
			return
		}
		if !failing {
			s.log.Error(err, "Audit write failed; the line is kept and written again", "retry", s.retry, "queued", len(s.lines))
			failing = true
		}
		t := time.NewTimer(s.retry)
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
			s.log.Error(err, "Dropped an audit line at shutdown: the writer still fails")
			return
		}
	}
}

// drain stops taking lines and waits until the queued ones are written, or
// ctx ends (what is left is then dropped and logged). Idempotent.
func (s *sink) drain(ctx context.Context) error {
	s.start.Do(func() { go s.run() })
	s.closed.Store(true)
	s.once.Do(func() { close(s.quit) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		s.halt.Do(func() { close(s.stop) }) // the writer ends after its current Write
		return fmt.Errorf("audit lines not written before the drain ended: %w", ctx.Err())
	}
}
