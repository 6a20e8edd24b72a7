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
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

func TestSubjectEscaping(t *testing.T) {
	tests := map[string]struct {
		run  stream.RunKey
		want string
	}{
		"plain":                    {stream.RunKey{Namespace: "default", Name: "run-1", UID: "u-1"}, "agentrun.events.default.run-1.u-1"},
		"dots":                     {stream.RunKey{Namespace: "ns", Name: "a.b", UID: "u"}, "agentrun.events.ns.a_2eb.u"},
		"underscore kept distinct": {stream.RunKey{Namespace: "ns", Name: "a_2eb", UID: "u"}, "agentrun.events.ns.a_5f2eb.u"},
		"wildcards":                {stream.RunKey{Namespace: "ns", Name: "*>", UID: "u"}, "agentrun.events.ns._2a_3e.u"},
		"upper and space":          {stream.RunKey{Namespace: "ns", Name: "A b", UID: "u"}, "agentrun.events.ns._41_20b.u"},
		"the UID keys the run":     {stream.RunKey{Namespace: "ns", Name: "a", UID: "6f1c-9a"}, "agentrun.events.ns.a.6f1c-9a"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Subject(DefaultSubjectPrefix, tc.run); got != tc.want {
				t.Errorf("Subject = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPublishAssignsSeqPerRunFromOne(t *testing.T) {
	s := openStore(t, Config{})
	for i := 1; i <= 5; i++ {
		if got := mustPublish(t, s, runA, final(i)); got != uint64(i) {
			t.Fatalf("run A event %d: seq %d", i, got)
		}
		if i <= 3 {
			if got := mustPublish(t, s, runB, text("m", "x")); got != uint64(i) {
				t.Fatalf("run B event %d: seq %d", i, got)
			}
		}
	}
	b, err := s.Bounds(ctxT(t), runA)
	if err != nil || b != (Bounds{Oldest: 1, Last: 5}) {
		t.Fatalf("Bounds(A) = %+v, %v; want 1..5", b, err)
	}
	got := replayAll(t, s, runA, 0)
	if d := cmp.Diff(seqRange(1, 5), seqs(got)); d != "" {
		t.Fatalf("replay seqs (-want +got):\n%s", d)
	}
	if got[2].Run != runA || got[2].StepName != "step-3" || got[2].Timestamp == 0 {
		t.Errorf("stored event = %+v", got[2])
	}
	if b, _ := s.Bounds(ctxT(t), stream.RunKey{Namespace: "x", Name: "none", UID: "u"}); b != (Bounds{}) {
		t.Errorf("Bounds(unknown) = %+v, want zero", b)
	}
}

func TestPublishRefusesInvalid(t *testing.T) {
	s := openStore(t, Config{})
	if _, err := s.Publish(ctxT(t), runA, stream.Event{Type: stream.TextMessageContent}); !errors.Is(err, stream.ErrInvalidEvent) {
		t.Errorf("event without messageId: %v", err)
	}
	if _, err := s.Publish(ctxT(t), stream.RunKey{Name: "x", UID: "u"}, final(1)); err == nil {
		t.Error("run without namespace accepted")
	}
	if _, err := s.Publish(ctxT(t), stream.RunKey{Namespace: "x", Name: "x"}, final(1)); err == nil ||
		!strings.Contains(err.Error(), "UID is required") {
		t.Errorf("run without UID: %v, want refused naming the UID", err)
	}
	if err := s.Replay(ctxT(t), stream.RunKey{Namespace: "x", Name: "x"}, 1, func(stream.Event) error { return nil }); err == nil {
		t.Error("a replay by name alone was accepted")
	}
}

// A restarted producer (a new Store on the same directory, its cache cold)
// continues the run's seq from the stream.
func TestSeqSurvivesProducerRestart(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	for i := range 3 {
		mustPublish(t, s, runA, final(i))
	}
	s.Close()
	s2 := openStore(t, Config{Dir: dir})
	if got := mustPublish(t, s2, runA, final(4)); got != 4 {
		t.Fatalf("after restart: seq %d, want 4", got)
	}
	if got := mustPublish(t, s2, runB, final(1)); got != 1 {
		t.Fatalf("new run after restart: seq %d, want 1", got)
	}
}

// A publish whose acknowledgement was lost is retried with the same bytes:
// it is stored once and the retry returns its seq.
func TestRetryIsIdempotent(t *testing.T) {
	m := NewMetrics(nil)
	s := openStore(t, Config{Metrics: m})
	ev := final(1)
	ev.Timestamp = 1234
	mustPublish(t, s, runA, ev)
	// Forget the acknowledgement, as if it had never arrived.
	rs := s.runState(s.Subject(runA))
	rs.seq, rs.streamSeq = 0, 0
	if got := mustPublish(t, s, runA, ev); got != 1 {
		t.Fatalf("retry: seq %d, want 1", got)
	}
	// And a retry after the producer also published more.
	mustPublish(t, s, runA, final(2))
	rs.seq, rs.streamSeq = 0, 0
	if got := mustPublish(t, s, runA, ev); got != 1 {
		t.Fatalf("late retry: seq %d, want 1", got)
	}
	if got := seqs(replayAll(t, s, runA, 1)); !cmp.Equal(got, []uint64{1, 2}) {
		t.Fatalf("stored seqs %v, want [1 2]", got)
	}
	if n := testutil.ToFloat64(m.SeqConflicts); n != 0 {
		t.Errorf("seq conflicts = %v, want 0 (a retry is not a conflict)", n)
	}
}

// The Nats-Msg-Id dedupe: the same id is stored once within the window.
func TestMsgIDDedupe(t *testing.T) {
	s := openStore(t, Config{})
	subj := s.Subject(runA)
	for range 2 {
		msg := nats.NewMsg(subj)
		msg.Data = []byte(`{"type":"STEP_STARTED","seq":1,"stepName":"x"}`)
		msg.Header.Set(SeqHeader, "1")
		msg.Header.Set(nats.MsgIdHdr, MsgID(runA, 1))
		if _, err := s.js.PublishMsg(ctxT(t), msg); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
}

// Two producers of one run (the gateway and the status watcher) interleave:
// every event is stored once, seqs 1..N without gap, each producer's events
// in its own order.
func TestTwoProducersOneRun(t *testing.T) {
	m := NewMetrics(nil)
	s1 := openStore(t, Config{Listen: "127.0.0.1:0", Metrics: m})
	s2 := openStore(t, Config{URL: s1.Embedded().ClientURL(), Metrics: m})
	const each = 150
	var wg sync.WaitGroup
	for p, s := range []*Store{s1, s2} {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Publish(context.Background(), runA, stream.Event{Type: stream.StepStarted, StepName: fmt.Sprintf("p%d-%d", p, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := replayAll(t, s1, runA, 0)
	if d := cmp.Diff(seqRange(1, 2*each), seqs(got)); d != "" {
		t.Fatalf("seqs (-want +got):\n%s", d)
	}
	next := map[string]int{}
	for _, ev := range got {
		var p string
		var i int
		if _, err := fmt.Sscanf(ev.StepName, "p%1s-%d", &p, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[p] {
			t.Fatalf("producer %s: event %d where %d was due", p, i, next[p])
		}
		next[p]++
	}
	t.Logf("seq conflicts resolved: %v", testutil.ToFloat64(m.SeqConflicts))
}

func TestReplay(t *testing.T) {
	s := openStore(t, Config{})
	for i := range 10 {
		mustPublish(t, s, runA, final(i))
	}
	mustPublish(t, s, runB, final(0))
	tests := map[string]struct {
		from uint64
		want []uint64
	}{
		"whole trajectory from 0": {0, seqRange(1, 10)},
		"from 1":                  {1, seqRange(1, 10)},
		"from the middle":         {7, seqRange(7, 10)},
		"from the last":           {10, []uint64{10}},
		"past the end":            {11, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, seqs(replayAll(t, s, runA, tc.from)), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	stop := errors.New("stop")
	n := 0
	if err := s.Replay(ctxT(t), runA, 0, func(stream.Event) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("Replay with a failing fn: %v after %d events", err, n)
	}
	if got := replayAll(t, s, stream.RunKey{Namespace: "x", Name: "none", UID: "u"}, 0); len(got) != 0 {
		t.Errorf("unknown run replayed %d events", len(got))
	}
}

// Subscribing after every position of a run that other runs interleave
// with yields exactly the events after it: the stored ones, then the live.
func TestSubscribeAfterEveryPosition(t *testing.T) {
	s := openStore(t, Config{})
	const stored, live = 20, 5
	for i := range stored {
		mustPublish(t, s, runA, final(i))
		mustPublish(t, s, runB, final(i))
	}
	ctx := ctxT(t)
	subs := make([]*Subscription, stored+1)
	for after := range subs {
		sub, err := s.Subscribe(ctx, runA, uint64(after))
		if err != nil {
			t.Fatal(err)
		}
		subs[after] = sub
	}
	for i := range live {
		mustPublish(t, s, runA, final(stored+i))
	}
	for after, sub := range subs {
		got := readN(t, sub, stored+live-after)
		if d := cmp.Diff(seqRange(uint64(after)+1, stored+live), seqs(got)); d != "" {
			t.Errorf("after %d (-want +got):\n%s", after, d)
		}
	}
}

// A reader that disconnects at a random point and resubscribes after the
// last event it saw, while the run keeps publishing, sees every event once.
func TestResubscribeWhilePublishingHasNoGapOrDuplicate(t *testing.T) {
	s := openStore(t, Config{})
	const total = 400
	go func() {
		for i := range total {
			if _, err := s.Publish(context.Background(), runA, text("m", strconv.Itoa(i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	r := rand.New(rand.NewPCG(3, 4))
	var got []stream.Event
	var last uint64
	for last < total {
		ctx, cancel := context.WithCancel(context.Background())
		sub, err := s.Subscribe(ctx, runA, last)
		if err != nil {
			t.Fatal(err)
		}
		n := min(1+r.IntN(40), total-int(last))
		evs := readN(t, sub, n)
		cancel()
		got = append(got, evs...)
		last = evs[len(evs)-1].Seq
	}
	if d := cmp.Diff(seqRange(1, total), seqs(got)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	for i, ev := range got {
		if ev.Delta != strconv.Itoa(i) {
			t.Fatalf("event %d carries %q", ev.Seq, ev.Delta)
		}
	}
}

// With a per-run limit the oldest events leave; Bounds says where the
// retained window starts, and replay and subscribe start there.
func TestRetentionBounds(t *testing.T) {
	s := openStore(t, Config{MaxEventsPerRun: 5})
	for i := range 12 {
		mustPublish(t, s, runA, final(i))
	}
	b, err := s.Bounds(ctxT(t), runA)
	if err != nil || b != (Bounds{Oldest: 8, Last: 12}) {
		t.Fatalf("Bounds = %+v, %v; want 8..12", b, err)
	}
	if got := seqs(replayAll(t, s, runA, 0)); !cmp.Equal(got, seqRange(8, 12)) {
		t.Errorf("replay = %v", got)
	}
	sub, err := s.Subscribe(ctxT(t), runA, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(readN(t, sub, 5)); !cmp.Equal(got, seqRange(8, 12)) {
		t.Errorf("subscribe after 2 = %v", got)
	}
	// The retained window moves on, and the seq keeps counting.
	if got := mustPublish(t, s, runA, final(13)); got != 13 {
		t.Errorf("next seq %d, want 13", got)
	}
}

// An acknowledged event survives a crash of the NATS server process
// (SIGKILL: no shutdown, no final flush). Without SyncAlways JetStream has
// written it to the store file before acknowledging (the kernel keeps it);
// SyncAlways also fsyncs it, which is what survives a power loss.
func TestAcknowledgedEventsSurviveServerCrash(t *testing.T) {
	for _, syncAlways := range []bool{false, true} {
		t.Run(fmt.Sprintf("SyncAlways=%v", syncAlways), func(t *testing.T) {
			dir := t.TempDir()
			srv := startNATSProcess(t, dir, "127.0.0.1:0", syncAlways)
			s := openStore(t, Config{URL: srv.url})
			var want []stream.Event
			for i := range 50 {
				ev := final(i)
				ev.Timestamp = int64(1000 + i)
				if _, err := s.Publish(ctxT(t), runA, ev); err != nil {
					t.Fatal(err)
				}
				ev.Seq, ev.Run = uint64(i+1), runA
				want = append(want, ev)
			}
			srv.kill()
			s.Close()

			srv2 := startNATSProcess(t, dir, "127.0.0.1:0", syncAlways)
			s2 := openStore(t, Config{URL: srv2.url})
			got := replayAll(t, s2, runA, 0)
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("after the crash (-want +got):\n%s", d)
			}
			if seq := mustPublish(t, s2, runA, final(50)); seq != 51 {
				t.Errorf("next seq after the crash: %d, want 51", seq)
			}
		})
	}
}

func TestEventJSONIsStoredAsIs(t *testing.T) {
	s := openStore(t, Config{})
	mustPublish(t, s, runA, stream.Event{Type: stream.ToolCallArgs, ToolCallID: "c", Delta: `{"a":`})
	m, err := s.st.GetLastMsgForSubject(ctxT(t), s.Subject(runA))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(m.Data, &obj); err != nil {
		t.Fatal(err)
	}
	if obj["type"] != "TOOL_CALL_ARGS" || obj["seq"] != 1.0 || obj["run"] != "team-a/survey.v2" || obj["delta"] != `{"a":` {
		t.Errorf("stored %s", m.Data)
	}
	if m.Header.Get(nats.MsgIdHdr) != "team-a/survey.v2/uid-a/1" || m.Header.Get(SeqHeader) != "1" {
		t.Errorf("headers %v", m.Header)
	}
}

// Readers that come and go leave no consumer behind: more of them than
// JetStream's default per-stream limit (1,000) subscribe and stop, one after
// another, and the next one still subscribes.
func TestReadersDeleteTheirConsumers(t *testing.T) {
	s := openStore(t, Config{})
	mustPublish(t, s, runA, final(1))
	for i := range 1100 {
		ctx, cancel := context.WithCancel(ctxT(t))
		sub, err := s.Subscribe(ctx, runA, 0)
		if err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
		<-sub.C
		cancel()
		for range sub.C { //nolint:revive // drain until the reader stopped
		}
		if i%100 == 0 {
			if err := s.Replay(ctxT(t), runA, 1, func(stream.Event) error { return nil }); err != nil {
				t.Fatalf("replay %d: %v", i, err)
			}
		}
	}
	info, err := s.st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxConsumers != DefaultMaxConsumers {
		t.Errorf("the stream's MaxConsumers is %d, want %d", info.Config.MaxConsumers, DefaultMaxConsumers)
	}
	if n := info.State.Consumers; n > 1 {
		t.Errorf("%d consumers left after every reader stopped", n)
	}
}
