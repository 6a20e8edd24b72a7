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
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// BenchmarkPublish100Runs: events/s into JetStream (embedded, file store)
// from 100 concurrent producers, one run each, each waiting for its acks in
// order (the per-run seq needs the previous ack).
func BenchmarkPublish100Runs(b *testing.B) {
	for _, syncAlways := range []bool{false, true} {
		b.Run(fmt.Sprintf("SyncAlways=%v", syncAlways), func(b *testing.B) {
			s := openStore(b, Config{SyncAlways: syncAlways})
			const producers = 100
			var next atomic.Int64
			ev := stream.Event{Type: stream.TextMessageContent, MessageID: "m", Delta: "a token or two"}
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for p := range producers {
				run := stream.RunKey{Namespace: "bench", Name: fmt.Sprintf("run-%d", p), UID: fmt.Sprintf("uid-%d", p)}
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := s.Publish(context.Background(), run, ev); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
