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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// fakePublisher records what it publishes; while down it fails every call.
type fakePublisher struct {
	mu   sync.Mutex
	down bool
	got  []stream.Event
}

func (f *fakePublisher) Publish(_ context.Context, _ stream.RunKey, ev stream.Event) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, errors.New("nats: no servers available for connection")
	}
	ev.Seq = uint64(len(f.got) + 1)
	f.got = append(f.got, ev)
	return ev.Seq, nil
}

func (f *fakePublisher) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *fakePublisher) events() []stream.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stream.Event(nil), f.got...)
}

func startProducer(t *testing.T, pub Publisher, opts ProducerOptions) *Producer {
	t.Helper()
	p := NewProducer(pub, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// While the store is down the buffer stays within its bound, merging
// deltas of one block first, then dropping deltas, never a final; Emit
// never blocks; once the store is back everything kept is published in
// order.
func TestProducerBoundedWhileStoreDown(t *testing.T) {
	pub := &fakePublisher{down: true}
	m := NewMetrics(nil)
	p := startProducer(t, pub, ProducerOptions{MaxEvents: 20, Shards: 1, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, Metrics: m})
	start := time.Now()
	// 10 finals, then 1,000 text deltas of one block, then 200 deltas
	// alternating between two tool calls (which cannot merge), then finals.
	for i := range 10 {
		mustEmit(t, p, final(i))
	}
	for range 1000 {
		mustEmit(t, p, text("m1", "ab"))
	}
	for i := range 200 {
		id := []string{"c1", "c2"}[i%2]
		mustEmit(t, p, stream.Event{Type: stream.ToolCallArgs, ToolCallID: id, Delta: "x"})
	}
	for i := 10; i < 15; i++ {
		mustEmit(t, p, final(i))
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("emitting 1,215 events while the store is down took %v", el)
	}
	if n := p.Len(); n > 20 {
		t.Fatalf("buffer holds %d events, bound 20", n)
	}
	if testutil.ToFloat64(m.ProducerMerges) == 0 || testutil.ToFloat64(m.ProducerDrops.WithLabelValues("delta")) == 0 {
		t.Errorf("merges %v, delta drops %v: want both > 0", testutil.ToFloat64(m.ProducerMerges), testutil.ToFloat64(m.ProducerDrops.WithLabelValues("delta")))
	}
	if n := testutil.ToFloat64(m.ProducerDrops.WithLabelValues("final")); n != 0 {
		t.Errorf("finals dropped: %v", n)
	}

	pub.setDown(false)
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var finals []string
	for _, ev := range pub.events() {
		if ev.Final() {
			finals = append(finals, ev.StepName)
		}
	}
	var want []string
	for i := range 15 {
		want = append(want, final(i).StepName)
	}
	if d := cmp.Diff(want, finals); d != "" {
		t.Errorf("finals published (-want +got):\n%s", d)
	}
	if g := testutil.ToFloat64(m.ProducerQueued); g != 0 {
		t.Errorf("buffered gauge %v after flush", g)
	}
}

// Deltas that merge lose no text: a buffer that only had to merge publishes
// the block's whole text.
func TestProducerMergeKeepsText(t *testing.T) {
	pub := &fakePublisher{down: true}
	p := startProducer(t, pub, ProducerOptions{MaxEvents: 4, Shards: 1, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond})
	mustEmit(t, p, stream.Event{Type: stream.TextMessageStart, MessageID: "m1"})
	var want strings.Builder
	for i := range 500 {
		d := string(rune('a' + i%26))
		mustEmit(t, p, text("m1", d))
		want.WriteString(d)
	}
	mustEmit(t, p, stream.Event{Type: stream.TextMessageEnd, MessageID: "m1"})
	pub.setDown(false)
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	evs := pub.events()
	for _, ev := range evs {
		got.WriteString(ev.Delta)
	}
	if got.String() != want.String() {
		t.Errorf("text %q, want %q", got.String(), want.String())
	}
	if evs[0].Type != stream.TextMessageStart || evs[len(evs)-1].Type != stream.TextMessageEnd {
		t.Errorf("block out of order: %v … %v", evs[0].Type, evs[len(evs)-1].Type)
	}
}

// Only when the buffer holds nothing but finals does a final go, counted.
func TestProducerDropsFinalsOnlyWhenNothingElse(t *testing.T) {
	pub := &fakePublisher{down: true}
	m := NewMetrics(nil)
	p := startProducer(t, pub, ProducerOptions{MaxEvents: 5, Shards: 1, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond, Metrics: m})
	for i := range 8 {
		mustEmit(t, p, final(i))
	}
	if n := testutil.ToFloat64(m.ProducerDrops.WithLabelValues("final")); n != 3 {
		t.Errorf("finals dropped %v, want 3", n)
	}
}

func TestProducerRefusesInvalid(t *testing.T) {
	p := NewProducer(&fakePublisher{}, ProducerOptions{})
	if err := p.Emit(runA, stream.Event{Type: stream.ToolCallArgs}); !errors.Is(err, stream.ErrInvalidEvent) {
		t.Errorf("Emit(invalid) = %v", err)
	}
}

// The real thing: the NATS server process is killed mid-run; the producer
// keeps accepting events, then publishes them once the server is back on
// the same address and directory; the run's seqs continue without gap.
func TestProducerRidesOutNATSOutage(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	srv := startNATSProcess(t, dir, addr, false)
	m := NewMetrics(prometheus.NewRegistry())
	s := openStore(t, Config{URL: srv.url, PublishTimeout: 500 * time.Millisecond, Metrics: m})
	p := startProducer(t, s, ProducerOptions{Shards: 2, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	for i := range 5 {
		mustEmit(t, p, final(i))
	}
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	for i := 5; i < 10; i++ {
		mustEmit(t, p, final(i))
	}
	// The producer tries, fails and keeps the events.
	NewWithT(t).Eventually(func() float64 { return testutil.ToFloat64(m.PublishErrors) }).
		WithTimeout(10 * time.Second).Should(BeNumerically(">=", 2))
	if p.Len() == 0 {
		t.Fatal("producer published while NATS was down")
	}
	startNATSProcess(t, dir, addr, false)
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatalf("flush after restart: %v (%d waiting)", err, p.Len())
	}
	got := replayAll(t, s, runA, 0)
	if d := cmp.Diff(seqRange(1, 10), seqs(got)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	for i, ev := range got {
		if ev.StepName != final(i).StepName {
			t.Errorf("seq %d is %q", ev.Seq, ev.StepName)
		}
	}
}

func mustEmit(t *testing.T, p *Producer, ev stream.Event) {
	t.Helper()
	if err := p.Emit(runA, ev); err != nil {
		t.Fatal(err)
	}
}
