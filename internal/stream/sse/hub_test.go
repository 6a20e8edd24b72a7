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
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// readSeqs reads a stream until seq last, returning the seqs it got.
func readSeqs(rd *sseReader, last uint64) ([]uint64, error) {
	var got []uint64
	for len(got) == 0 || got[len(got)-1] < last {
		m, err := rd.next()
		if err != nil {
			return got, err
		}
		n, err := strconv.ParseUint(m.id, 10, 64)
		if err != nil {
			return got, fmt.Errorf("event %s without a seq id %q", m.ev.Type, m.id)
		}
		got = append(got, n)
	}
	return got, nil
}

func consecutive(got []uint64, from, to uint64) error {
	if uint64(len(got)) != to-from+1 {
		return fmt.Errorf("got %d events, want %d..%d", len(got), from, to)
	}
	for i, n := range got {
		if n != from+uint64(i) {
			return fmt.Errorf("event %d has seq %d, want %d", i, n, from+uint64(i))
		}
	}
	return nil
}

// Many subscribers of one run share one store subscription (one JetStream
// consumer); each one resuming from anywhere, while the run publishes, gets
// exactly the events after its Last-Event-ID: those from the store up to
// the live tail, then the live ones, no gap, no duplicate.
func TestSubscribersShareOneConsumerAndResumeExactly(t *testing.T) {
	f := newFixture(t, store.Config{}, Options{})
	ctx := ctxT(t)
	for i := range 50 {
		f.publish(runA, final(i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	hold := make(chan struct{}) // the first subscribers stay open until the end
	subscribe := func(after uint64, last uint64, stay bool) {
		resp := f.get(ctx, f.url(runA, ""), map[string]string{"Last-Event-ID": strconv.FormatUint(after, 10)})
		wg.Go(func() {
			defer func() { _ = resp.Body.Close() }()
			got, err := readSeqs(newSSEReader(resp.Body), last)
			if err == nil {
				err = consecutive(got, after+1, last)
			}
			if err != nil {
				errs <- fmt.Errorf("after %d: %w", after, err)
			}
			if stay {
				<-hold
			}
		})
	}
	for range 20 {
		subscribe(0, 50, true)
	}

	js, err := jetstream.New(f.store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, store.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)
	g.Eventually(func() (int, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Consumers, nil
	}).Should(Equal(1), "20 open subscribers of one run, caught up: one consumer, the run's live tail")

	// Resumes at random points while the run goes on.
	var stored atomic.Uint64
	stored.Store(50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 150 {
			stored.Store(f.publish(runA, text(fmt.Sprintf("m%d", i/50), "x")))
		}
	}()
	for range 20 {
		subscribe(uint64(rand.IntN(int(stored.Load())+1)), 200, false)
	}
	<-done
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func text(id, delta string) stream.Event {
	return stream.Event{Type: stream.TextMessageContent, MessageID: id, Delta: delta}
}

func final(i int) stream.Event {
	return stream.Event{Type: stream.StepStarted, StepName: fmt.Sprintf("step-%d", i)}
}
