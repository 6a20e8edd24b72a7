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
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// trajectory returns n events of up to three interleaved open blocks (text,
// reasoning, tool arguments), seq from 1.
func trajectory(r *rand.Rand, n int) []stream.Event {
	var out []stream.Event
	var open []stream.Event // the delta template of each open block
	next := 0
	for len(out) < n {
		if len(open) == 0 || (len(open) < 3 && r.IntN(5) == 0) {
			next++
			id := "b" + strings.Repeat("i", next)
			switch r.IntN(3) {
			case 0:
				out = append(out, stream.Event{Type: stream.TextMessageStart, MessageID: id})
				open = append(open, stream.Event{Type: stream.TextMessageContent, MessageID: id})
			case 1:
				out = append(out, stream.Event{Type: stream.ReasoningMessageStart, MessageID: id})
				open = append(open, stream.Event{Type: stream.ReasoningMessageContent, MessageID: id})
			default:
				out = append(out, stream.Event{Type: stream.ToolCallStart, ToolCallID: id, ToolCallName: "t"})
				open = append(open, stream.Event{Type: stream.ToolCallArgs, ToolCallID: id})
			}
			continue
		}
		k := r.IntN(len(open))
		if r.IntN(10) == 0 {
			d := open[k]
			end := stream.Event{Type: stream.TextMessageEnd, MessageID: d.MessageID}
			switch d.Type {
			case stream.ReasoningMessageContent:
				end.Type = stream.ReasoningMessageEnd
			case stream.ToolCallArgs:
				end = stream.Event{Type: stream.ToolCallEnd, ToolCallID: d.ToolCallID}
			}
			out = append(out, end)
			open = append(open[:k], open[k+1:]...)
			continue
		}
		// Mostly the same block keeps streaming, as a model does.
		if r.IntN(4) != 0 {
			k = len(open) - 1
		}
		d := open[k]
		d.Delta = strings.Repeat(string(rune('a'+r.IntN(26))), 1+r.IntN(4))
		out = append(out, d)
	}
	for i := range out {
		out[i].Seq = uint64(i + 1)
	}
	return out
}

// equivalent checks the merge rule: per block the concatenated deltas are
// equal, the finals are the same events in the same order, seqs strictly
// increase, and each event delivered ends at its original.
func equivalent(orig, got []stream.Event) error {
	concat := func(evs []stream.Event) map[string]string {
		m := map[string]string{}
		for _, e := range evs {
			if e.IsDelta() {
				m[string(e.Type)+"/"+e.Block()] += e.Delta
			}
		}
		return m
	}
	finals := func(evs []stream.Event) []stream.Event {
		var f []stream.Event
		for _, e := range evs {
			if e.Final() {
				f = append(f, e)
			}
		}
		return f
	}
	if d := cmp.Diff(concat(orig), concat(got)); d != "" {
		return errors.New("deltas differ: " + d)
	}
	if d := cmp.Diff(finals(orig), finals(got)); d != "" {
		return errors.New("finals differ: " + d)
	}
	var last uint64
	for _, e := range got {
		o := orig[e.Seq-1]
		if e.Seq <= last || o.Type != e.Type || o.Block() != e.Block() || !strings.HasSuffix(e.Delta, o.Delta) {
			return errors.New("reordered, duplicated or misattributed event")
		}
		last = e.Seq
	}
	return nil
}

// The merge rule as a property: whatever the queue's bound and however
// slowly it is read, what comes out is the original up to merging, and the
// queue never holds more than its bound.
func TestQueueMergeProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ctx := context.Background()
	mergedWhole := 0
	for iter := range 300 {
		orig := trajectory(r, 10+r.IntN(300))
		bound := 2 + r.IntN(40)
		q := NewQueue(bound, 1<<30)
		var got []stream.Event
		overflowed := false
		for _, ev := range orig {
			if !q.Push(ev) {
				overflowed = true
				break
			}
			for r.IntN(4) == 0 {
				ev, res := q.Next(ctx, time.Millisecond)
				if res != Got {
					break
				}
				got = append(got, ev)
			}
		}
		if st := q.Stats(); st.HighLen > bound {
			t.Fatalf("iteration %d: queue held %d events, bound %d", iter, st.HighLen, bound)
		}
		if overflowed {
			// Everything delivered before the overflow is a prefix of the
			// original up to merging.
			if len(got) > 0 {
				n := got[len(got)-1].Seq
				if err := equivalent(orig[:n], got); err != nil {
					t.Fatalf("iteration %d (overflowed): %v", iter, err)
				}
			}
			continue
		}
		if q.Stats().Merges > 0 {
			mergedWhole++
		}
		q.Close(nil)
		for {
			ev, res := q.Next(ctx, time.Millisecond)
			if res != Got {
				if res != Ended {
					t.Fatalf("iteration %d: drained with %v", iter, res)
				}
				break
			}
			got = append(got, ev)
		}
		if err := equivalent(orig, got); err != nil {
			t.Fatalf("iteration %d (bound %d): %v", iter, bound, err)
		}
	}
	if mergedWhole < 30 {
		t.Errorf("only %d of 300 trajectories merged without overflowing: the property is hardly exercised", mergedWhole)
	}
}

func TestQueueOverflowsOnFinalsAlone(t *testing.T) {
	q := NewQueue(3, 1<<20)
	for i := range 3 {
		if !q.Push(stream.Event{Type: stream.StepStarted, StepName: "s", Seq: uint64(i + 1)}) {
			t.Fatalf("push %d refused", i)
		}
	}
	if q.Push(stream.Event{Type: stream.StepStarted, StepName: "s", Seq: 4}) {
		t.Fatal("fourth final accepted into a queue of 3")
	}
	if _, res := q.Next(context.Background(), time.Millisecond); res != Overflowed {
		t.Fatalf("Next = %v, want Overflowed", res)
	}
	if q.Push(stream.Event{Type: stream.StepStarted, StepName: "s", Seq: 5}) {
		t.Error("an overflowed queue accepted an event")
	}
}

func TestQueueBytesBound(t *testing.T) {
	q := NewQueue(1000, 2000)
	big := strings.Repeat("x", 500)
	pushed := 0
	for i := range 10 {
		if !q.Push(stream.Event{Type: stream.TextMessageContent, MessageID: "m", Delta: big, Seq: uint64(i + 1)}) {
			break
		}
		pushed++
	}
	if st := q.Stats(); st.HighBytes > 2000 {
		t.Errorf("queue reached %d bytes, bound 2000", st.HighBytes)
	}
	if pushed == 10 {
		t.Error("5,000 bytes of text fit a 2,000-byte queue")
	}
}

func TestQueueEndsWithSourceError(t *testing.T) {
	q := NewQueue(4, 1<<20)
	q.Push(stream.Event{Type: stream.StepStarted, StepName: "s", Seq: 1})
	q.Close(errors.New("nats: connection closed"))
	if _, res := q.Next(context.Background(), time.Millisecond); res != Got {
		t.Fatalf("queued event not delivered before the end: %v", res)
	}
	if _, res := q.Next(context.Background(), time.Millisecond); res != Ended || q.Err() == nil {
		t.Fatalf("Next = %v, Err = %v", res, q.Err())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, res := NewQueue(1, 1).Next(ctx, time.Second); res != Cancelled {
		t.Errorf("cancelled Next = %v", res)
	}
	if _, res := NewQueue(1, 1).Next(context.Background(), time.Millisecond); res != Idle {
		t.Errorf("idle Next = %v", res)
	}
}
