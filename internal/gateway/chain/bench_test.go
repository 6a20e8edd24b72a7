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

package chain_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

func benchDispatch(context.Context, *chain.Call) chain.Outcome {
	return chain.Outcome{Result: "a result of ordinary length with nothing secret in it at all"}
}

func BenchmarkRunEmpty(b *testing.B) {
	c, _ := newChain(b, nil, nil)
	call := toolCall()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.Run(ctx, call, benchDispatch)
	}
}

// The sample policy's chain: auth (a cached answer), rate_limit, redact,
// audit (to io.Discard).
func BenchmarkRunSample(b *testing.B) {
	c, _ := newChain(b, sampleChain(), chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(okAuth), RateLimit: 1e12, Burst: 1 << 30, Audit: io.Discard}))
	ctx := context.Background()
	call := toolCall()
	call.Arguments = map[string]any{"url": "https://example.org/a", "depth": 2}
	b.ReportAllocs()
	for b.Loop() {
		if _, ref := c.Run(ctx, call, benchDispatch); ref != nil {
			b.Fatal(ref)
		}
	}
}

func BenchmarkRunSampleParallel(b *testing.B) {
	c, _ := newChain(b, sampleChain(), chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(okAuth), RateLimit: 1e12, Burst: 1 << 30, Audit: io.Discard}))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		call := toolCall()
		call.Arguments = map[string]any{"url": "https://example.org/a", "depth": 2}
		for pb.Next() {
			if _, ref := c.Run(ctx, call, benchDispatch); ref != nil {
				b.Fatal(ref)
			}
		}
	})
}

// slowWriter takes 300 ms per Write: source 003's slow audit disk.
type slowWriter struct{}

func (slowWriter) Write(p []byte) (int, error) {
	time.Sleep(300 * time.Millisecond)
	return len(p), nil
}

// BenchmarkAuditSlowSink: 10 runs call concurrently through audit (buffered,
// fail open) whose sink takes 300 ms per line. It reports the p99 of each
// call's time in the chain (dispatch answers at once): what the sink adds.
func BenchmarkAuditSlowSink(b *testing.B) {
	resolved := []v1alpha1.ResolvedInterceptor{{Name: chain.NameAudit, Class: v1alpha1.ClassObservability,
		Phase: v1alpha1.InterceptorPost, OnError: v1alpha1.PostureAllow, Buffered: true}}
	c, _ := newChain(b, resolved, chain.Builtins(chain.BuiltinOptions{Audit: slowWriter{}}))
	const runs = 10
	var mu sync.Mutex
	var took []time.Duration
	b.SetParallelism((runs + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		call := toolCall()
		call.Run = fmt.Sprintf("run-%d", next.Add(1)%runs)
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			if _, ref := c.Run(context.Background(), call, benchDispatch); ref != nil {
				b.Error(ref)
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
	})
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs/call")
		b.ReportMetric(float64(took[len(took)-1].Microseconds()), "max-µs/call")
	}
}
