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
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

const ttlHeader = "Nats-TTL"

func withTTL(ev stream.Event, ttl time.Duration) stream.Event {
	ev.TTL = ttl
	return ev
}

func storedHeader(t *testing.T, s *Store, run stream.RunKey, seq uint64, name string) string {
	t.Helper()
	m, err := s.st.GetMsg(ctxT(t), 1, jetstream.WithGetMsgSubject(s.Subject(run)))
	for err == nil && headerSeq(m) != seq {
		m, err = s.st.GetMsg(ctxT(t), m.Sequence+1, jetstream.WithGetMsgSubject(s.Subject(run)))
	}
	if err != nil {
		t.Fatalf("event %d of %s: %v", seq, run, err)
	}
	return m.Header.Get(name)
}

// An event published with a TTL leaves the store when it expires; the
// run's retained window moves past it, its seq keeps counting, and an event
// without TTL (the stream's MaxAge) stays.
func TestEventTTLExpires(t *testing.T) {
	g := NewWithT(t)
	s := openStore(t, Config{})
	mustPublish(t, s, runA, withTTL(final(1), time.Second))
	mustPublish(t, s, runA, final(2))
	mustPublish(t, s, runB, withTTL(final(1), time.Second))
	if h := storedHeader(t, s, runA, 1, ttlHeader); h != "1s" {
		t.Errorf("stored Nats-TTL %q, want 1s", h)
	}
	if h := storedHeader(t, s, runA, 2, ttlHeader); h != "" {
		t.Errorf("an event without TTL stored Nats-TTL %q", h)
	}

	g.Eventually(func() (Bounds, error) { return s.Bounds(ctxT(t), runA) }).
		WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).
		Should(Equal(Bounds{Oldest: 2, Last: 2}))
	g.Eventually(func() (Bounds, error) { return s.Bounds(ctxT(t), runB) }).
		WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).
		Should(Equal(Bounds{}))
	g.Expect(seqs(replayAll(t, s, runA, 0))).To(Equal([]uint64{2}))
	g.Expect(mustPublish(t, s, runA, final(3))).To(Equal(uint64(3)))
}

// JetStream's shortest TTL is one second: a shorter one is raised to it,
// not refused.
func TestPublishTTLFloor(t *testing.T) {
	if got := PublishTTL(10 * time.Millisecond); got != time.Second {
		t.Errorf("PublishTTL(10ms) = %v, want 1s", got)
	}
	if got := PublishTTL(0); got != 0 {
		t.Errorf("PublishTTL(0) = %v, want 0 (the stream's MaxAge)", got)
	}
	s := openStore(t, Config{})
	mustPublish(t, s, runA, withTTL(final(1), 10*time.Millisecond))
	if h := storedHeader(t, s, runA, 1, ttlHeader); h != "1s" {
		t.Errorf("stored Nats-TTL %q, want 1s", h)
	}
}

// The TTL travels in a header, not in the event's bytes: a retry whose
// first attempt landed is recognized as before (also with another TTL) and
// stored once, and the stored event keeps the first attempt's TTL.
func TestRetryWithTTLIsIdempotent(t *testing.T) {
	s := openStore(t, Config{})
	ev := withTTL(final(1), time.Hour)
	ev.Timestamp = 1234
	mustPublish(t, s, runA, ev)
	rs := s.runState(s.Subject(runA))
	rs.seq, rs.streamSeq = 0, 0
	if got := mustPublish(t, s, runA, ev); got != 1 {
		t.Fatalf("retry: seq %d, want 1", got)
	}
	rs.seq, rs.streamSeq = 0, 0
	if got := mustPublish(t, s, runA, withTTL(ev, 2*time.Hour)); got != 1 {
		t.Fatalf("retry with another TTL: seq %d, want 1", got)
	}
	if got := seqs(replayAll(t, s, runA, 1)); !cmp.Equal(got, []uint64{1}) {
		t.Fatalf("stored seqs %v, want [1]", got)
	}
	if h := storedHeader(t, s, runA, 1, ttlHeader); h != "1h0m0s" {
		t.Errorf("stored Nats-TTL %q, want 1h0m0s", h)
	}
}

// A stream created without AllowMsgTTL (by an older stream server, which a
// gateway attaches to) refuses TTLs: events are stored without one.
func TestPublishTTLOnAStreamWithoutTTLs(t *testing.T) {
	s := openStore(t, Config{})
	old, err := s.js.CreateStream(ctxT(t), jetstream.StreamConfig{
		Name: "OLD_EVENTS", Subjects: []string{"old.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The store as it would be attached to that stream.
	s.st, s.cfg.Stream, s.cfg.SubjectPrefix = old, "OLD_EVENTS", "old"
	for i := range 3 {
		if got := mustPublish(t, s, runA, withTTL(final(i), time.Hour)); got != uint64(i+1) {
			t.Fatalf("seq %d, want %d", got, i+1)
		}
	}
	if !s.noTTL.Load() {
		t.Error("the store did not notice the stream refuses TTLs")
	}
	if h := storedHeader(t, s, runA, 2, ttlHeader); h != "" {
		t.Errorf("stored Nats-TTL %q on a stream without TTLs", h)
	}
}

// jsonSizes is the stored JSON size of each of the run's events, by seq.
func jsonSizes(t *testing.T, s *Store, run stream.RunKey) map[uint64]int64 {
	t.Helper()
	out := map[uint64]int64{}
	for _, ev := range replayAll(t, s, run, 0) {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out[ev.Seq] = int64(len(b))
	}
	return out
}

// Trim keeps exactly the run's newest events within the bound (by their
// stored JSON), removes the older ones, leaves other runs alone, and the
// run's seq keeps counting; a reader resuming before the new oldest event
// is told by Bounds, and Replay from 1 starts there.
func TestTrimKeepsTheNewestWithinTheBound(t *testing.T) {
	m := NewMetrics(nil)
	s := openStore(t, Config{Metrics: m})
	const n = 200
	for i := range n {
		// Deltas of different lengths, 100 to 600 bytes of text.
		mustPublish(t, s, runA, text("m-1", strings.Repeat("x", 100+(i*37)%500)))
		if i%10 == 0 {
			mustPublish(t, s, runB, final(i))
		}
	}
	sizes := jsonSizes(t, s, runA)
	// The stored bytes are the JSON Replay returns.
	last, err := s.st.GetLastMsgForSubject(ctxT(t), s.Subject(runA))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(last.Data)) != sizes[n] {
		t.Fatalf("stored %d bytes, the replayed event marshals to %d", len(last.Data), sizes[n])
	}
	var total int64
	for _, sz := range sizes {
		total += sz
	}
	maxBytes := total / 3
	// The newest events whose sum is within maxBytes.
	var kept int64
	oldest := uint64(n + 1)
	for oldest > 1 && kept+sizes[oldest-1] <= maxBytes {
		oldest--
		kept += sizes[oldest]
	}
	if oldest <= 1 || oldest >= n {
		t.Fatalf("bad test: keeps from %d", oldest)
	}

	removed, err := s.Trim(ctxT(t), runA, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	if removed != oldest-1 {
		t.Errorf("removed %d, want %d", removed, oldest-1)
	}
	if got := testutil.ToFloat64(m.Trimmed); got != float64(oldest-1) {
		t.Errorf("agentrun_stream_trimmed_total = %v, want %d", got, oldest-1)
	}
	b, err := s.Bounds(ctxT(t), runA)
	if err != nil || b != (Bounds{Oldest: oldest, Last: n}) {
		t.Fatalf("Bounds = %+v, %v; want %d..%d", b, err, oldest, n)
	}
	if got := seqs(replayAll(t, s, runA, 1)); !cmp.Equal(got, seqRange(oldest, n)) {
		t.Errorf("replay from 1 = %v, want %d..%d", got, oldest, n)
	}
	var left int64
	for seq, sz := range jsonSizes(t, s, runA) {
		left += sz
		if sz != sizes[seq] {
			t.Errorf("event %d changed size", seq)
		}
	}
	if left > maxBytes || left+sizes[oldest-1] <= maxBytes {
		t.Errorf("kept %d bytes (the next older event has %d), bound %d", left, sizes[oldest-1], maxBytes)
	}
	if got := seqs(replayAll(t, s, runB, 0)); !cmp.Equal(got, seqRange(1, n/10)) {
		t.Errorf("the other run: %v, want 1..%d untouched", got, n/10)
	}

	// Within the bound there is nothing to do.
	if removed, err := s.Trim(ctxT(t), runA, maxBytes); err != nil || removed != 0 {
		t.Errorf("second Trim: removed %d, %v; want 0", removed, err)
	}
	// The seq continues, also for a producer that has to read it back.
	if got := mustPublish(t, s, runA, final(1)); got != n+1 {
		t.Errorf("next seq %d, want %d", got, n+1)
	}
	s.mu.Lock()
	s.runs = map[string]*runState{}
	s.mu.Unlock()
	if got := mustPublish(t, s, runA, final(2)); got != n+2 {
		t.Errorf("seq after reloading the last event %d, want %d", got, n+2)
	}
}

// A bound below the run's last event keeps that event alone: the seq
// keeps counting. A run without events has nothing to trim.
func TestTrimKeepsTheLastEvent(t *testing.T) {
	s := openStore(t, Config{})
	for i := range 20 {
		mustPublish(t, s, runA, final(i))
	}
	removed, err := s.Trim(ctxT(t), runA, 1)
	if err != nil || removed != 19 {
		t.Fatalf("Trim = %d, %v; want 19", removed, err)
	}
	if b, _ := s.Bounds(ctxT(t), runA); b != (Bounds{Oldest: 20, Last: 20}) {
		t.Errorf("Bounds = %+v, want 20..20", b)
	}
	if removed, err := s.Trim(ctxT(t), runB, 1); err != nil || removed != 0 {
		t.Errorf("Trim of an empty run = %d, %v", removed, err)
	}
	if _, err := s.Trim(ctxT(t), runA, 0); err == nil {
		t.Error("Trim to 0 bytes: no error")
	}
}

// The scan reads headers only: each message's size arrives in
// Nats-Msg-Size with an empty body.
func TestHeadersOnlyConsumerDeliversSizes(t *testing.T) {
	s := openStore(t, Config{})
	mustPublish(t, s, runA, text("m", "hello"))
	cons, err := s.st.OrderedConsumer(ctxT(t), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.Subject(runA)}, HeadersOnly: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.st.GetLastMsgForSubject(ctxT(t), s.Subject(runA))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Data()) != 0 || msg.Headers().Get(MsgSizeHeader) != strconv.Itoa(len(stored.Data)) ||
		!bytes.Contains(stored.Data, []byte(`"delta":"hello"`)) {
		t.Errorf("headers-only message: body %q, headers %v (stored %d bytes)", msg.Data(), msg.Headers(), len(stored.Data))
	}
}
