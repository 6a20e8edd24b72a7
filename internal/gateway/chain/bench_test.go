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
	"io"
	"testing"

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
