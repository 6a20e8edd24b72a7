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
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

func TestWireFormat(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	f.publish(runA, stream.Event{Type: stream.TextMessageStart, MessageID: "m1", Timestamp: 5})
	resp := f.get(ctxT(t), f.url(runA, ""), map[string]string{"Last-Event-ID": "0"})
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	var lines []string
	for len(lines) < 5 {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSuffix(l, "\n"))
	}
	want := []string{
		": agentrun run stream team-a/survey.v2",
		"",
		"id: 1",
		"event: TEXT_MESSAGE_START",
		`data: {"type":"TEXT_MESSAGE_START","seq":1,"run":"team-a/survey.v2","messageId":"m1","timestamp":5}`,
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// A new subscriber gets a STATE_SNAPSHOT as of the last stored event first
// (its id that event's seq), then only the events after it.
func TestSnapshotFirstThenLiveTail(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	for i := range 3 {
		f.publish(runA, step(i))
	}
	resp := f.get(ctxT(t), f.url(runA, ""), nil)
	defer func() { _ = resp.Body.Close() }()
	rd := newSSEReader(resp.Body)
	first := readMsgs(t, rd, 1)[0]
	if first.event != string(stream.StateSnapshot) || first.id != "3" || string(first.ev.Snapshot) != `{"phase":"Running","through":3}` {
		t.Fatalf("first message %+v, want STATE_SNAPSHOT id 3", first)
	}
	if first.ev.Seq != 0 {
		t.Errorf("snapshot carries seq %d; it has none of its own", first.ev.Seq)
	}
	f.publish(runA, step(3))
	f.publish(runA, step(4))
	if got := msgSeqs(readMsgs(t, rd, 2)); !cmp.Equal(got, []uint64{4, 5}) {
		t.Errorf("tail seqs %v, want [4 5]", got)
	}
	if !cmp.Equal(f.snapAt, []uint64{3}) {
		t.Errorf("snapshot asked as of %v, want [3]", f.snapAt)
	}
}

// Resuming after every position — by Last-Event-ID or ?after= — yields
// exactly the events after it, no snapshot, then the live tail.
func TestResumeAfterEveryPosition(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	const n = 12
	for i := range n {
		f.publish(runA, step(i))
	}
	last := uint64(n)
	for after := uint64(0); after <= n; after++ {
		for _, how := range []string{"header", "query"} {
			ctx, cancel := context.WithCancel(t.Context())
			var resp *http.Response
			if how == "header" {
				resp = f.get(ctx, f.url(runA, ""), map[string]string{"Last-Event-ID": strconv.FormatUint(after, 10)})
			} else {
				resp = f.get(ctx, f.url(runA, "after="+strconv.FormatUint(after, 10)), nil)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("after %d (%s): %s", after, how, resp.Status)
			}
			rd := newSSEReader(resp.Body)
			got := readMsgs(t, rd, int(last-after))
			if d := cmp.Diff(seqRange(after+1, last), msgSeqs(got), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("after %d (%s) (-want +got):\n%s", after, how, d)
			}
			// The live tail follows.
			last = f.publish(runA, step(int(last)))
			if m := readMsgs(t, rd, 1)[0]; m.ev.Seq != last {
				t.Errorf("after %d (%s): live event %+v, want seq %d", after, how, m, last)
			}
			cancel()
			_ = resp.Body.Close()
		}
	}
}

// A client that drops at random points and reconnects with the id of the
// last message it read, while the run streams, reassembles the whole
// trajectory exactly once.
func TestReconnectWhileStreamingHasNoGapOrDuplicate(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	const total = 300
	go func() {
		for i := range total {
			if _, err := f.store.Publish(context.Background(), runA, stream.Event{Type: stream.TextMessageContent, MessageID: "m", Delta: strconv.Itoa(i)}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	r := rand.New(rand.NewPCG(5, 6))
	var got []sseMsg
	last := "0"
	for len(got) < total {
		ctx, cancel := context.WithCancel(t.Context())
		resp := f.get(ctx, f.url(runA, ""), map[string]string{"Last-Event-ID": last})
		ms := readMsgs(t, newSSEReader(resp.Body), min(1+r.IntN(30), total-len(got)))
		cancel()
		_ = resp.Body.Close()
		got = append(got, ms...)
		last = ms[len(ms)-1].id
	}
	if d := cmp.Diff(seqRange(1, total), msgSeqs(got)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	for i, m := range got {
		if m.ev.Delta != strconv.Itoa(i) {
			t.Fatalf("message %d carries %q", i, m.ev.Delta)
		}
	}
}

func TestExpiredLastEventID(t *testing.T) {
	f := newFixture(t, store.Config{MaxEventsPerRun: 5}, Options{})
	for i := range 12 {
		f.publish(runA, step(i))
	}
	for _, after := range []string{"3", "6", "13"} {
		resp := f.get(ctxT(t), f.url(runA, ""), map[string]string{"Last-Event-ID": after})
		if resp.StatusCode != http.StatusGone {
			t.Fatalf("Last-Event-ID %s: %s, want 410", after, resp.Status)
		}
		if h := resp.Header.Get(HeaderOldestSeq); h != "8" {
			t.Errorf("%s: %q", HeaderOldestSeq, h)
		}
		st := readStatus(t, resp)
		msg, _ := st["message"].(string)
		if st["reason"] != "Expired" || !strings.Contains(msg, "Last-Event-ID "+after) {
			t.Errorf("Last-Event-ID %s: status %v", after, st)
		}
		if after != "13" && !strings.Contains(msg, "oldest available event is 8") {
			t.Errorf("message %q does not name the oldest seq", msg)
		}
		if d, _ := st["details"].(map[string]any); d["oldestSeq"] != 8.0 {
			t.Errorf("details %v", st["details"])
		}
	}
	// Just inside the window: 7 resumes at 8.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := f.get(ctx, f.url(runA, ""), map[string]string{"Last-Event-ID": "7"})
	defer func() { _ = resp.Body.Close() }()
	if got := msgSeqs(readMsgs(t, newSSEReader(resp.Body), 5)); !cmp.Equal(got, seqRange(8, 12)) {
		t.Errorf("resume after 7: %v", got)
	}
}

func TestErrors(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	other := stream.RunKey{Namespace: "team-a", Name: "nope"}
	tests := map[string]struct {
		url       string
		header    map[string]string
		authorize AuthorizerFunc
		code      int
		reason    string
		msg       string
	}{
		"unknown run": {
			url: f.url(other, ""), code: 404, reason: "NotFound",
			msg: `researchruns.agentrun.dev "nope" not found in namespace "team-a"`,
		},
		"bad Last-Event-ID": {
			url: f.url(runA, ""), header: map[string]string{"Last-Event-ID": "x"}, code: 400, reason: "BadRequest",
			msg: `Last-Event-ID "x" is not an event seq`,
		},
		"no identity": {
			url: f.url(runA, ""), code: 401, reason: "Unauthorized",
			authorize: func(context.Context, *http.Request, Attributes) (Decision, error) {
				return Decision{Reason: "token expired"}, nil
			},
			msg: `get researchruns.agentrun.dev "survey.v2" in namespace "team-a" needs an authenticated caller`,
		},
		"no permission": {
			url: f.url(runA, ""), code: 403, reason: "Forbidden",
			authorize: func(_ context.Context, _ *http.Request, a Attributes) (Decision, error) {
				return Decision{Authenticated: true, User: "alice", Reason: "RBAC: no rule"}, nil
			},
			msg: `User "alice" cannot get resource "researchruns" in API group "agentrun.dev" in the namespace "team-a": RBAC: no rule`,
		},
		"no permission hides existence": {
			url: f.url(other, ""), code: 403, reason: "Forbidden",
			authorize: func(context.Context, *http.Request, Attributes) (Decision, error) {
				return Decision{Authenticated: true, User: "alice"}, nil
			},
			msg: `cannot get resource "researchruns"`,
		},
		"authorizer down fails closed": {
			url: f.url(runA, ""), code: 503, reason: "ServiceUnavailable",
			authorize: func(context.Context, *http.Request, Attributes) (Decision, error) {
				return Decision{Allowed: true, Authenticated: true}, errors.New("SubjectAccessReview: connection refused")
			},
			msg: "connection refused",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f.mu.Lock()
			f.authorize = tc.authorize
			f.mu.Unlock()
			resp := f.get(ctxT(t), tc.url, tc.header)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %s, want %d", resp.Status, tc.code)
			}
			st := readStatus(t, resp)
			if st["reason"] != tc.reason || st["kind"] != "Status" || !strings.Contains(st["message"].(string), tc.msg) {
				t.Errorf("status %v, want reason %s and a message containing %q", st, tc.reason, tc.msg)
			}
		})
	}
}

func TestAuthorizerSeesTheRequestAndAttributes(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	var got Attributes
	var token string
	f.authorize = func(_ context.Context, r *http.Request, a Attributes) (Decision, error) {
		got, token = a, r.Header.Get("Authorization")
		return Decision{Authenticated: true, User: "bob"}, nil
	}
	resp := f.get(ctxT(t), f.url(runA, ""), map[string]string{"Authorization": "Bearer t0k"})
	_ = resp.Body.Close()
	want := Attributes{Verb: "get", APIGroup: "agentrun.dev", Resource: "researchruns", Namespace: "team-a", Name: "survey.v2"}
	if got != want || token != "Bearer t0k" {
		t.Errorf("authorizer saw %+v with %q", got, token)
	}
}

// ?format=jsonl writes the whole trajectory from seq 1, one event a line,
// and ends; Last-Event-ID does not apply.
func TestJSONLExport(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	const n = 250
	for i := range n {
		f.publish(runA, step(i))
	}
	resp := f.get(ctxT(t), f.url(runA, "format=jsonl"), map[string]string{"Last-Event-ID": "100"})
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/jsonl" || resp.Header.Get(HeaderLastSeq) != "250" {
		t.Fatalf("%s %v", resp.Status, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	var seqsGot []uint64
	for sc.Scan() {
		var ev stream.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seqsGot = append(seqsGot, ev.Seq)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(seqRange(1, n), seqsGot); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestKeepalive(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{Keepalive: 20 * time.Millisecond})
	resp := f.get(ctxT(t), f.url(runA, ""), nil)
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-deadline:
			t.Fatal("no keepalive comment")
		default:
		}
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == ": keepalive\n" {
			return
		}
	}
}

// One client that stops reading and N that read: the slow one's queue
// stays within its bound however much is published, the fast ones get every
// event promptly, and the slow one, once finals alone overflow its queue, is
// told to reconnect with its Last-Event-ID.
func TestSlowClientIsBoundedAndSlowsNoOne(t *testing.T) {
	// The byte bound is the whole lag a client may have: the queue is the
	// only buffer between the run's live tail and the client (no consumer
	// of its own buffers ahead). 1 MiB holds all the text a burst publishes
	// here, so the fast clients, on a loaded machine, never overflow, and
	// the slow one overflows on its finals (the event bound).
	const queueEvents, queueBytes = 32, 1 << 20
	f := newFixture(t, store.Config{}, Options{QueueEvents: queueEvents, QueueBytes: queueBytes})
	ctx := ctxT(t)
	slow := f.get(ctx, f.url(runA, "after=0"), nil) // never read until the end
	defer func() { _ = slow.Body.Close() }()
	const fast = 5
	results := make(chan error, fast)
	const blocks, deltasPerBlock = 20, 60
	total := blocks * (deltasPerBlock + 2)
	payload := strings.Repeat("x", 400)
	for range fast {
		resp := f.get(ctx, f.url(runA, "after=0"), nil)
		go func() {
			defer func() { _ = resp.Body.Close() }()
			results <- readWhole(newSSEReader(resp.Body), total, blocks, len(payload)*deltasPerBlock)
		}()
	}
	start := time.Now()
	for b := range blocks {
		id := fmt.Sprintf("m%d", b)
		f.publish(runA, stream.Event{Type: stream.TextMessageStart, MessageID: id})
		for range deltasPerBlock {
			f.publish(runA, stream.Event{Type: stream.TextMessageContent, MessageID: id, Delta: payload})
		}
		f.publish(runA, stream.Event{Type: stream.TextMessageEnd, MessageID: id})
	}
	for range fast {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d events to %d fast clients in %v beside one that reads nothing", total, fast, time.Since(start))
	if p := f.h.Peak(); p.HighLen > queueEvents || p.HighBytes > queueBytes || p.Merges == 0 {
		t.Errorf("queues peaked at %d events / %d bytes with %d merges (bound %d / %d)", p.HighLen, p.HighBytes, p.Merges, queueEvents, queueBytes)
	} else {
		t.Logf("queues peaked at %d events / %d bytes; %d merges", p.HighLen, p.HighBytes, p.Merges)
	}
	// The slow client now reads: what it got is in order, with the reconnect
	// event last, naming the last id it was sent.
	rd := newSSEReader(slow.Body)
	var lastID string
	var prev uint64
	for {
		m, err := rd.next()
		if err != nil {
			t.Fatalf("slow client: %v before a reconnect event", err)
		}
		if m.ev.Type == stream.Custom && m.ev.Name == ReconnectEventName {
			if m.hasID {
				t.Error("reconnect event has an id")
			}
			var v map[string]string
			_ = json.Unmarshal(m.ev.Value, &v)
			if v["reason"] != "SlowConsumer" || v["lastEventId"] != lastID {
				t.Errorf("reconnect value %v, last id sent %s", v, lastID)
			}
			break
		}
		n, _ := strconv.ParseUint(m.id, 10, 64)
		if n <= prev {
			t.Fatalf("slow client: id %d after %d (%q %s %s)", n, prev, m.id, m.ev.Type, m.ev.Value)
		}
		prev, lastID = n, m.id
	}
}

// readWhole reads a client's stream to seq total and checks it is the
// published one up to merging: ids increase, every block's START and END
// arrive, each block's text is whole.
func readWhole(rd *sseReader, total, blocks, textLen int) error {
	var prev uint64
	texts := map[string]int{}
	finals := 0
	for prev < uint64(total) {
		m, err := rd.next()
		if err != nil {
			return fmt.Errorf("after id %d: %w", prev, err)
		}
		n, _ := strconv.ParseUint(m.id, 10, 64)
		if n <= prev {
			return fmt.Errorf("id %d after %d (%s %s)", n, prev, m.ev.Type, m.ev.Value)
		}
		prev = n
		if m.ev.Final() {
			finals++
		} else {
			texts[m.ev.MessageID] += len(m.ev.Delta)
		}
	}
	if finals != 2*blocks {
		return fmt.Errorf("%d finals, want %d", finals, 2*blocks)
	}
	for id, n := range texts {
		if n != textLen {
			return fmt.Errorf("block %s: %d bytes of text, want %d", id, n, textLen)
		}
	}
	return nil
}

// A run deleted and created again under its name is another run: its
// stream (export, replay from the start, the live tail) shows none of the
// deleted run's events, and its own start at seq 1; the deleted run's
// events are not served under the name any more.
func TestARecreatedRunDoesNotShowTheDeletedRunsStream(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	old := runA
	f.publish(old, stream.Event{Type: stream.RunStarted, ThreadID: old.String(), RunID: old.UID})
	f.publish(old, stream.Event{Type: stream.Custom, Name: "secret-of-the-old-run", Value: json.RawMessage(`"old"`)})

	recreated := stream.RunKey{Namespace: old.Namespace, Name: old.Name, UID: "uid-survey-v2-again"}
	f.mu.Lock()
	f.exists = map[stream.RunKey]bool{recreated: true}
	f.mu.Unlock()
	f.publish(recreated, stream.Event{Type: stream.RunStarted, ThreadID: recreated.String(), RunID: recreated.UID})

	resp := f.get(ctxT(t), f.url(recreated, "format=jsonl"), nil)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(HeaderLastSeq) != "1" {
		t.Fatalf("export: %s %v", resp.Status, resp.Header)
	}
	if strings.Contains(string(body), "secret-of-the-old-run") || !strings.Contains(string(body), `"runId":"uid-survey-v2-again"`) {
		t.Errorf("the recreated run's export shows the deleted run's events, or not its own:\n%s", body)
	}

	resp = f.get(ctxT(t), f.url(recreated, ""), map[string]string{"Last-Event-ID": "0"})
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 {
		t.Fatalf("resume from 0: %s", resp.Status)
	}
	rd := newSSEReader(resp.Body)
	first := readMsgs(t, rd, 1)[0]
	if first.ev.Type != stream.RunStarted || first.ev.RunID != recreated.UID || first.id != "1" {
		t.Errorf("the first event from the start is %s %s (id %s), want the recreated run's RUN_STARTED at 1",
			first.ev.Type, first.ev.RunID, first.id)
	}
	f.publish(recreated, step(2))
	if m := readMsgs(t, rd, 1)[0]; m.ev.StepName != "step-2" || m.id != "2" {
		t.Errorf("the live tail's next event is %+v (id %s), want step-2 at 2", m.ev, m.id)
	}
}
