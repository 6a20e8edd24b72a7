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

package store

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// Publisher is what a Producer publishes through; *Store is one.
type Publisher interface {
	Publish(ctx context.Context, run stream.RunKey, ev stream.Event) (uint64, error)
}

var _ Publisher = (*Store)(nil)

// ProducerOptions bound a Producer.
type ProducerOptions struct {
	// MaxEvents and MaxBytes bound the events waiting, over all runs
	// (defaults 10,000 and 16 MiB).
	MaxEvents int
	MaxBytes  int
	// Shards publish in parallel, each run always through the same one so
	// that its events keep their order (default 8).
	Shards int
	// RetryMin and RetryMax bound the backoff between attempts while the
	// store is unreachable (defaults 50 ms and 2 s).
	RetryMin, RetryMax time.Duration
	// Clock stamps events as they are emitted (time.Now by default), so
	// that a retried publish carries the same bytes.
	Clock func() time.Time
	// Metrics counts drops and merges.
	Metrics *Metrics
}

// Producer is a bounded, never-blocking buffer in front of a Publisher, for
// callers on a run's hot path (a model stream, a tool call): Emit returns at
// once; the events are published in the background, each run's in order,
// retried while the store is unreachable. When the buffer is full it first
// merges adjacent deltas of one block (no text lost), then drops the oldest
// delta, and drops a final only when it holds nothing else; each merge and
// drop is counted. A run is never slowed by its stream.
type Producer struct {
	pub    Publisher
	opts   ProducerOptions
	shards []*shard
}

type shard struct {
	p         *Producer
	mu        sync.Mutex
	items     []pending
	bytes     int
	maxEvents int
	maxBytes  int
	wake      chan struct{}
}

type pending struct {
	run  stream.RunKey
	ev   stream.Event
	size int
	// tried: published at least once (it may have landed); from then on it
	// is neither merged nor dropped, so a retry sends the same bytes.
	tried bool
}

// NewProducer returns a Producer publishing through pub; call Run to start
// it.
func NewProducer(pub Publisher, opts ProducerOptions) *Producer {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 10_000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 16 << 20
	}
	if opts.Shards <= 0 {
		opts.Shards = 8
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = 50 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(2*time.Second, opts.RetryMin)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	p := &Producer{pub: pub, opts: opts}
	for range opts.Shards {
		p.shards = append(p.shards, &shard{
			p:         p,
			maxEvents: max(1, opts.MaxEvents/opts.Shards),
			maxBytes:  max(1, opts.MaxBytes/opts.Shards),
			wake:      make(chan struct{}, 1),
		})
	}
	return p
}

// Run publishes buffered events until ctx ends.
func (p *Producer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range p.shards {
		wg.Go(func() { s.drain(ctx) })
	}
	wg.Wait()
}

// Emit queues ev for the run and returns at once. It refuses only an
// invalid event or run key.
func (p *Producer) Emit(run stream.RunKey, ev stream.Event) error {
	if err := run.Validate(); err != nil {
		return err
	}
	if err := ev.Validate(); err != nil {
		return err
	}
	if ev.Timestamp == 0 {
		ev.Timestamp = p.opts.Clock().UnixMilli()
	}
	ev.Run = run
	h := fnv.New32a()
	_, _ = h.Write([]byte(run.String()))
	s := p.shards[h.Sum32()%uint32(len(p.shards))]
	s.push(pending{run: run, ev: ev, size: ev.Size()})
	return nil
}

// Len is the number of events waiting.
func (p *Producer) Len() int {
	n := 0
	for _, s := range p.shards {
		s.mu.Lock()
		n += len(s.items)
		s.mu.Unlock()
	}
	return n
}

// Flush waits until every event emitted before it has been published (or
// dropped), or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for p.Len() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func (s *shard) push(it pending) {
	m := s.p.opts.Metrics
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append(s.items, it)
	s.bytes += it.size
	queued := 1
	for len(s.items) > s.maxEvents || s.bytes > s.maxBytes {
		if s.mergeOne() {
			queued--
			if m != nil {
				m.ProducerMerges.Inc()
			}
			continue
		}
		dropped, ok := s.dropOldest()
		if !ok {
			break
		}
		queued--
		if m != nil {
			m.ProducerDrops.WithLabelValues(kindOf(dropped.IsDelta())).Inc()
		}
	}
	if m != nil {
		m.ProducerQueued.Add(float64(queued))
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// mergeOne folds one delta into the delta before it (both untried, of one
// block), newest first; false if there is no such pair.
func (s *shard) mergeOne() bool {
	for i := len(s.items) - 1; i > 0; i-- {
		a, b := &s.items[i-1], &s.items[i]
		if a.tried || a.run != b.run {
			continue
		}
		if merged, ok := stream.Merge(a.ev, b.ev); ok {
			a.ev = merged
			a.size += len(b.ev.Delta)
			s.bytes -= b.size - len(b.ev.Delta)
			s.items = append(s.items[:i], s.items[i+1:]...)
			return true
		}
	}
	return false
}

// dropOldest removes the oldest untried delta, or if there is none the
// oldest untried final.
func (s *shard) dropOldest() (stream.Event, bool) {
	victim := -1
	for i := range s.items {
		if s.items[i].tried {
			continue
		}
		if s.items[i].ev.IsDelta() {
			victim = i
			break
		}
		if victim < 0 {
			victim = i
		}
	}
	if victim < 0 {
		return stream.Event{}, false
	}
	ev := s.items[victim].ev
	s.bytes -= s.items[victim].size
	s.items = append(s.items[:victim], s.items[victim+1:]...)
	return ev, true
}

func (s *shard) drain(ctx context.Context) {
	m := s.p.opts.Metrics
	backoff := s.p.opts.RetryMin
	for {
		s.mu.Lock()
		for len(s.items) == 0 {
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			s.mu.Lock()
		}
		s.items[0].tried = true
		it := s.items[0]
		s.mu.Unlock()

		_, err := s.p.pub.Publish(ctx, it.run, it.ev)
		if ctx.Err() != nil {
			return
		}
		permanent := errors.Is(err, stream.ErrInvalidEvent) || errors.Is(err, nats.ErrMaxPayload)
		if err == nil || permanent {
			s.mu.Lock()
			s.bytes -= s.items[0].size
			s.items = s.items[1:]
			s.mu.Unlock()
			if m != nil {
				m.ProducerQueued.Dec()
				if permanent {
					m.ProducerDrops.WithLabelValues(kindOf(it.ev.IsDelta())).Inc()
				}
			}
			backoff = s.p.opts.RetryMin
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.p.opts.RetryMax)
	}
}
