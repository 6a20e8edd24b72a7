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

package toolserver

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkFakeRecord is the fake's bookkeeping of one call, past the ring's
// capacity (constant memory).
func BenchmarkFakeRecord(b *testing.B) {
	f, err := NewFake(ToolSpec{Name: "echo"})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"path":"a.txt"}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.record(Call{Tool: "echo", Arguments: args, IdempotencyKey: "idem-1"})
		}
	})
	if n := len(f.Calls()); n > MaxRecordedCalls {
		b.Fatalf("kept %d calls", n)
	}
}

// BenchmarkFakeCall is one echo call over MCP (streamable HTTP, loopback).
func BenchmarkFakeCall(b *testing.B) {
	f, err := NewFake(ToolSpec{Name: "echo"})
	if err != nil {
		b.Fatal(err)
	}
	cs := mustConnect(b, serve(b, Options{Fake: f}), nil)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"path": "a.txt"},
		Meta: mcp.Meta{MetaIdempotencyKey: "idem-1"}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cs.CallTool(context.Background(), params); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
