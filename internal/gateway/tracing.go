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
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/tracing"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The gateway's spans follow the OpenTelemetry GenAI semantic conventions: a
// model request is a client span "chat <model>" (gen_ai.operation.name chat,
// gen_ai.request.model, gen_ai.usage.input_tokens/output_tokens), a tool call
// an internal span "execute_tool <tool>" (gen_ai.tool.name,
// gen_ai.tool.call.id). Every span of a run is in the run's trace: its parent
// is the caller's traceparent when that names a span of the run's trace (the
// TRACEPARENT an attempt gets), else the run's root span, with the caller's
// span, if any, as a link. Only the trace and span IDs are read from the
// caller: not its tracestate, not its sampling flag (the run's decides), and
// never its baggage. A provider gets the gateway's own span as traceparent
// (only while tracing is on), nothing the agent sent. Attributes agentrun.*
// name the run.

const tracerName = "agentrun.dev/gateway"

// Attribute keys of agentrun's own (not in the semantic conventions).
const (
	attrNamespace = attribute.Key("agentrun.namespace")
	attrRun       = attribute.Key("agentrun.run")
	attrAttempt   = attribute.Key("agentrun.attempt")
	attrPolicy    = attribute.Key("agentrun.policy")
	attrSession   = attribute.Key("agentrun.session")
	attrOutcome   = attribute.Key("agentrun.outcome")
	attrRisk      = attribute.Key("agentrun.tool.risk")
	attrEffect    = attribute.Key("agentrun.tool.effect")
)

// traceContext reads and writes the W3C traceparent alone: an agent's
// baggage is never read, so never handed on.
var traceContext = propagation.TraceContext{}

// spanParent is ctx with the parent of a span of the gateway's for a request
// carrying h, and the span's links (spanParentOf).
func (k *keeper) spanParent(ctx context.Context, h http.Header) (context.Context, trace.SpanStartOption) {
	caller := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(h)))
	var run trace.SpanContext
	k.mu.Lock()
	if owner := metav1.GetControllerOf(k.obj); owner != nil {
		run = tracing.RunSpanContext(owner.UID)
	}
	k.mu.Unlock()
	parent, links := spanParentOf(caller, run)
	return trace.ContextWithRemoteSpanContext(ctx, parent), trace.WithLinks(links...)
}

// spanParentOf decides the parent of a gateway span from the caller's span
// context (from its traceparent; invalid when it sent none) and the run's
// root span (invalid when the attempt names no run): the caller's span when
// it is in the run's trace, else the run's root span with the caller's span
// as a link. Only the caller's trace and span IDs are kept: its tracestate
// is dropped and the run's sampling flag replaces its own.
func spanParentOf(caller, run trace.SpanContext) (trace.SpanContext, []trace.Link) {
	if !caller.IsValid() {
		return run, nil
	}
	caller = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: caller.TraceID(), SpanID: caller.SpanID(), TraceFlags: run.TraceFlags(), Remote: true,
	})
	if run.IsValid() && caller.TraceID() == run.TraceID() {
		return caller, nil
	}
	return run, []trace.Link{{SpanContext: caller}}
}

// runAttributes name the attempt's run.
func (k *keeper) runAttributes() []attribute.KeyValue {
	k.mu.Lock()
	defer k.mu.Unlock()
	return []attribute.KeyValue{
		attrNamespace.String(k.key.Namespace), attrRun.String(k.obj.Spec.RunName), attrAttempt.String(k.key.Name),
		attrPolicy.String(k.obj.Spec.Policy.Name), attrSession.String(k.obj.Labels[v1alpha1.LabelSession]),
	}
}

// startModelSpan starts the span of one model request.
func (k *keeper) startModelSpan(r *http.Request, model string, maxTokens int64) (context.Context, trace.Span) {
	attrs := append(k.runAttributes(), semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(model))
	if maxTokens > 0 {
		attrs = append(attrs, semconv.GenAIRequestMaxTokens(int(maxTokens)))
	}
	ctx, links := k.spanParent(r.Context(), r.Header)
	return otel.Tracer(tracerName).Start(ctx, "chat "+model,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...), links)
}

// spanUpstream names the provider on the span of ctx and, while tracing is
// on, hands the provider that span (the gateway's own) as traceparent: no
// tracestate, no baggage. With tracing off the span of ctx is not the
// gateway's (a no-op span carries its parent's context), so nothing is sent.
func spanUpstream(ctx context.Context, req *http.Request, m v1alpha1.Model) {
	span := trace.SpanFromContext(ctx)
	if u, err := url.Parse(m.BaseURL); err == nil && u.Hostname() != "" {
		span.SetAttributes(semconv.ServerAddress(u.Hostname()))
	}
	if !tracing.Enabled() {
		return
	}
	sc := span.SpanContext()
	own := trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sc.SpanID(), TraceFlags: sc.TraceFlags()})
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), own), propagation.HeaderCarrier(req.Header))
}

// usageOf reads the token usage a provider reported in an answer or a
// stream chunk.
func usageOf(payload []byte) (in, out int64, ok bool) {
	if !bytes.Contains(payload, []byte(`"usage"`)) || bytes.Contains(payload, []byte(`"usage":null`)) {
		return 0, 0, false
	}
	var u struct {
		Model string `json:"model"`
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(payload, &u) != nil || u.Usage == nil {
		return 0, 0, false
	}
	return u.Usage.PromptTokens, u.Usage.CompletionTokens, true
}

// spanUsage records a reported usage on the span of ctx. A span that
// records nothing (tracing off) is not worth decoding the answer again for.
func spanUsage(ctx context.Context, payload []byte) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if in, out, ok := usageOf(payload); ok {
		span.SetAttributes(semconv.GenAIUsageInputTokens(int(in)), semconv.GenAIUsageOutputTokens(int(out)))
	}
}

// endModelSpan ends a model request's span with its outcome: the exchange's
// (ok, upstream_error, error, stream_cut) or, for a request refused before
// dispatch, the refusal's code (error.type).
func endModelSpan(span trace.Span, sw *statusWriter, x *exchange) {
	switch {
	case x != nil && x.outcome != "":
		span.SetAttributes(attrOutcome.String(x.outcome))
		spanCost(span, x)
		if x.outcome != "ok" {
			span.SetAttributes(semconv.ErrorTypeKey.String(x.outcome))
			span.SetStatus(codes.Error, x.outcome)
		}
	case sw.code >= 400:
		span.SetAttributes(attrOutcome.String("refused"), semconv.ErrorTypeKey.String(sw.errCode))
		span.SetStatus(codes.Error, sw.errCode)
	}
	span.End()
}

// statusWriter remembers the status and the error code of the answer (an
// OpenAI-shaped error body); it flushes like the writer it wraps.
type statusWriter struct {
	http.ResponseWriter
	code    int
	errCode string
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	if s.code >= 400 && s.errCode == "" {
		var eb gatewayapi.ErrorBody
		if json.Unmarshal(b, &eb) == nil {
			s.errCode = eb.Error.Code
		}
		if s.errCode == "" {
			s.errCode = http.StatusText(s.code)
		}
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// toolSpan runs one tools/call in its span: gen_ai execute_tool, ended with
// the call's outcome (the refusal's code as error.type).
func (k *keeper) toolSpan(ctx context.Context, p *mcp.CallToolParamsRaw, call func(context.Context) *mcp.CallToolResult) *mcp.CallToolResult {
	hr, _ := ctx.Value(httpHeaderKey{}).(http.Header)
	attrs := append(k.runAttributes(), semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(p.Name),
		semconv.GenAIToolType("function"))
	k.mu.Lock()
	for _, t := range k.obj.Spec.Policy.Tools {
		if t.Name == p.Name {
			attrs = append(attrs, attrRisk.String(string(t.Risk)), attrEffect.String(string(t.Effect)))
		}
	}
	k.mu.Unlock()
	ctx, links := k.spanParent(ctx, hr)
	ctx, span := otel.Tracer(tracerName).Start(ctx, "execute_tool "+p.Name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...), links)
	defer span.End()
	res := call(ctx)
	if res == nil {
		return res
	}
	if id, ok := res.Meta[gatewayapi.MetaCallID].(string); ok && id != "" {
		span.SetAttributes(semconv.GenAIToolCallID(id))
	}
	if res.IsError {
		code, _ := res.Meta[gatewayapi.MetaCode].(string)
		if code == "" {
			code = "tool_failed"
		}
		span.SetAttributes(attrOutcome.String("error"), semconv.ErrorTypeKey.String(code))
		span.SetStatus(codes.Error, code)
	} else {
		span.SetAttributes(attrOutcome.String("ok"))
	}
	return res
}

// httpHeaderKey carries the MCP request's HTTP header (its traceparent).
type httpHeaderKey struct{}
