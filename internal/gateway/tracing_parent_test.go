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

package gateway

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun/internal/tracing"
)

func TestSpanParentOf(t *testing.T) {
	run := tracing.RunSpanContext("run-uid")
	state, _ := trace.ParseTraceState("exfil=abc")
	span := func(tid trace.TraceID, flags trace.TraceFlags) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
			TraceFlags: flags, TraceState: state, Remote: true})
	}
	inRun, foreign := span(run.TraceID(), 0), span(trace.TraceID{9, 9, 9}, trace.FlagsSampled)
	bare := func(sc trace.SpanContext, flags trace.TraceFlags) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sc.SpanID(), TraceFlags: flags, Remote: true})
	}
	for name, tc := range map[string]struct {
		caller, run trace.SpanContext
		wantParent  trace.SpanContext
		wantLink    trace.SpanContext
	}{
		"no traceparent: the run's root":                     {trace.SpanContext{}, run, run, trace.SpanContext{}},
		"a span of the run's trace: it, with the run's flag": {inRun, run, bare(inRun, trace.FlagsSampled), trace.SpanContext{}},
		"another trace: the run's root, the caller a link":   {foreign, run, run, bare(foreign, trace.FlagsSampled)},
		"no run: a new trace, the caller a link":             {foreign, trace.SpanContext{}, trace.SpanContext{}, bare(foreign, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			parent, links := spanParentOf(tc.caller, tc.run)
			if !parent.Equal(tc.wantParent) {
				t.Errorf("parent %v, want %v", parent, tc.wantParent)
			}
			switch {
			case !tc.wantLink.IsValid() && len(links) != 0:
				t.Errorf("links %v, want none", links)
			case tc.wantLink.IsValid() && (len(links) != 1 || !links[0].SpanContext.Equal(tc.wantLink)):
				t.Errorf("links %v, want %v", links, tc.wantLink)
			}
			if parent.TraceState().Len() != 0 {
				t.Errorf("the caller's tracestate reached the parent: %v", parent.TraceState())
			}
		})
	}
}
