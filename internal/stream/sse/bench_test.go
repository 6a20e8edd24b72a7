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
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// BenchmarkPublishToClientLatency: from the call to Publish to the SSE
// client having parsed the event, one event at a time paced at 1 ms, over a
// loopback HTTP connection to an embedded store; p50 and p99 reported.
func BenchmarkPublishToClientLatency(b *testing.B) {
	f := newFixture(b, store.Config{}, Options{})
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	resp := f.get(ctx, f.url(runA, "after=0"), nil)
	defer func() { _ = resp.Body.Close() }()
	rd := newSSEReader(resp.Body)
	// Each run of the benchmark has a fresh store: event i has seq i+1.
	sent := make([]atomic.Int64, b.N+1)
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(lat) < b.N {
			m, err := rd.next()
			if err != nil {
				b.Error(err)
				return
			}
			seq, _ := strconv.ParseUint(m.id, 10, 64)
			lat = append(lat, time.Duration(time.Now().UnixNano()-sent[seq].Load()))
		}
	}()
	b.ResetTimer()
	for i := range b.N {
		sent[i+1].Store(time.Now().UnixNano())
		if _, err := f.store.Publish(ctx, runA, stream.Event{Type: stream.TextMessageContent, MessageID: "m", Delta: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	<-done
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
