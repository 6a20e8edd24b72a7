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

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/tracing"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// A caller's span: what an agent with TRACEPARENT sends, a span of its
// run's trace (gatewaytest's run has UID run-uid).
var (
	callerTrace       = tracing.RunTraceID("run-uid").String()
	callerSpan        = "00f067aa0ba902b7"
	callerTraceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// A span of another trace, which an agent may send to smuggle its choice of
// IDs, tracestate and baggage to the provider.
const (
	foreignTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	foreignTraceparent = "00-" + foreignTrace + "-" + "00f067aa0ba902b7" + "-00"
	foreignTracestate  = "exfil=c2stcHJvdmlkZXItc2VjcmV0"
	foreignBaggage     = "stolen=the-checkpoint,user=eve"
)

// inMemoryTracing installs a tracer provider exporting to memory for the
// test (the global provider: these tests do not run in parallel).
func inMemoryTracing(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()); tracing.Uninstall() })
	return exp
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func spanNamed(exp *tracetest.InMemoryExporter, name string) func() *tracetest.SpanStub {
	return func() *tracetest.SpanStub {
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				return &s
			}
		}
		return nil
	}
}

func chatWithTraceparent(e *gatewaytest.Env, body []byte, tp string) *http.Response {
	req, _ := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	req.Header.Set("Content-Type", "application/json")
	if tp != "" {
		req.Header.Set("traceparent", tp)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// A model request is a GenAI chat span, a child of the caller's
// traceparent, with the model, the token usage the provider reported, the
// run's names; the provider gets the trace context in turn.
func TestModelRequestSpanFollowsGenAIConventionsUnderTheCallersTrace(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Labels[v1alpha1.LabelSession] = "team-a" })
	var upstreamTP string
	inner := rec.inner
	rec.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamTP = r.Header.Get("traceparent")
		inner.ServeHTTP(w, r)
	})

	resp := chatWithTraceparent(e, chat(gatewaytest.Model, `,"max_tokens":100,"agentrun_scripted":{"say":"hi","tokens":42}`),
		callerTraceparent)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Eventually(spanNamed(exp, "chat "+gatewaytest.Model)).ShouldNot(BeNil())
	s := *spanNamed(exp, "chat "+gatewaytest.Model)()

	g.Expect(s.SpanKind).To(Equal(trace.SpanKindClient))
	g.Expect(s.Parent.TraceID().String()).To(Equal(callerTrace))
	g.Expect(s.Parent.SpanID().String()).To(Equal(callerSpan), "the caller's span is the parent")
	a := attrs(s)
	g.Expect(a["gen_ai.operation.name"].AsString()).To(Equal("chat"))
	g.Expect(a["gen_ai.request.model"].AsString()).To(Equal(gatewaytest.Model))
	g.Expect(a["gen_ai.request.max_tokens"].AsInt64()).To(BeEquivalentTo(100))
	g.Expect(a["gen_ai.usage.input_tokens"].AsInt64()).To(BeEquivalentTo(21))
	g.Expect(a["gen_ai.usage.output_tokens"].AsInt64()).To(BeEquivalentTo(21))
	g.Expect(a["server.address"].AsString()).To(Equal("127.0.0.1"))
	g.Expect(a["agentrun.run"].AsString()).To(Equal(gatewaytest.Run))
	g.Expect(a["agentrun.session"].AsString()).To(Equal("team-a"))
	g.Expect(a["agentrun.policy"].AsString()).To(Equal("p"))
	g.Expect(a["agentrun.outcome"].AsString()).To(Equal("ok"))
	g.Expect(s.Status.Code).To(Equal(codes.Unset))

	g.Expect(e.Metric("agentrun_gateway_session_model_requests_total",
		map[string]string{"namespace": gatewaytest.Namespace, "session": "team-a", "policy": "p"})).To(BeEquivalentTo(1))
	g.Expect(e.Metric("agentrun_gateway_session_tokens_total", map[string]string{"session": "team-a"})).To(BeEquivalentTo(42))
	g.Expect(upstreamTP).To(HavePrefix("00-"+callerTrace+"-"), "the provider is called inside the same trace")
	g.Expect(upstreamTP).To(ContainSubstring(s.SpanContext.SpanID().String()), "... as a child of the chat span")
}

// A streamed answer's usage is read from its last chunk; an agent that sends
// no traceparent gets its spans under the run's root span (the run's UID is
// its trace).
func TestStreamedModelRequestSpanWithoutTraceparentJoinsTheRunsTrace(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, _ := modelEnv(t, nil)
	resp := chatWithTraceparent(e, chat("scripted", `,"stream":true,"agentrun_scripted":{"say":"streamed","tokens":25}`), "")
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Eventually(spanNamed(exp, "chat scripted")).ShouldNot(BeNil())
	s := *spanNamed(exp, "chat scripted")()
	run := tracing.RunSpanContext("run-uid")
	g.Expect(s.Parent.TraceID()).To(Equal(run.TraceID()))
	g.Expect(s.Parent.SpanID()).To(Equal(run.SpanID()))
	a := attrs(s)
	g.Expect(a["gen_ai.usage.input_tokens"].AsInt64()).To(BeEquivalentTo(13))
	g.Expect(a["gen_ai.usage.output_tokens"].AsInt64()).To(BeEquivalentTo(12))
}

// A refused model request's span says why: error.type is the refusal's code.
func TestRefusedModelRequestSpanNamesTheCode(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, _ := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 0 })
	resp := chatWithTraceparent(e, chat(gatewaytest.Model, ""), callerTraceparent)
	g.Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Eventually(spanNamed(exp, "chat "+gatewaytest.Model)).ShouldNot(BeNil())
	s := *spanNamed(exp, "chat "+gatewaytest.Model)()
	g.Expect(s.Status.Code).To(Equal(codes.Error))
	g.Expect(attrs(s)["error.type"].AsString()).To(Equal(gatewayapi.CodeGrantExhausted))
	g.Expect(attrs(s)["agentrun.outcome"].AsString()).To(Equal("refused"))
	g.Expect(e.Metric("agentrun_gateway_session_refusals_total",
		map[string]string{"code": gatewayapi.CodeGrantExhausted})).To(BeEquivalentTo(1))
}

type traceparentTransport struct{ token, tp string }

func (b traceparentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set("traceparent", b.tp)
	return http.DefaultTransport.RoundTrip(r)
}

// A tool call is a GenAI execute_tool span under the caller's traceparent;
// a refused one names its code.
func TestToolCallSpanFollowsGenAIConventions(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, _ := doorEnv(t, nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: e.URL() + gatewayapi.MCPPath, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: traceparentTransport{gatewaytest.Token, callerTraceparent}},
	}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = cs.Close() }()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "raft"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "no.such.tool"})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(spanNamed(exp, "execute_tool search")).ShouldNot(BeNil())
	s := *spanNamed(exp, "execute_tool search")()
	g.Expect(s.Parent.TraceID().String()).To(Equal(callerTrace))
	g.Expect(s.Parent.SpanID().String()).To(Equal(callerSpan))
	a := attrs(s)
	g.Expect(a["gen_ai.operation.name"].AsString()).To(Equal("execute_tool"))
	g.Expect(a["gen_ai.tool.name"].AsString()).To(Equal("search"))
	g.Expect(a["gen_ai.tool.call.id"].AsString()).NotTo(BeEmpty())
	g.Expect(a["agentrun.tool.risk"].AsString()).To(Equal("Low"))
	g.Expect(a["agentrun.outcome"].AsString()).To(Equal("ok"))

	g.Eventually(spanNamed(exp, "execute_tool no.such.tool")).ShouldNot(BeNil())
	r := *spanNamed(exp, "execute_tool no.such.tool")()
	g.Expect(r.Status.Code).To(Equal(codes.Error))
	g.Expect(attrs(r)["error.type"].AsString()).To(Equal(gatewayapi.CodeUnknownTool))
}

// The agent's trace context never reaches the provider: a traceparent of
// another trace, its tracestate and its baggage are not forwarded, nor do
// they parent the gateway's span (the run's root does, the agent's span is a
// link, and the agent's "not sampled" flag does not hide the span). The
// provider gets the gateway's own span as traceparent, and nothing else.
func TestModelRequestHandsTheProviderTheGatewaysSpanNotTheAgents(t *testing.T) {
	g := NewWithT(t)
	exp := inMemoryTracing(t)
	e, rec := modelEnv(t, nil)
	var upstream http.Header
	inner := rec.inner
	rec.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream = r.Header.Clone()
		inner.ServeHTTP(w, r)
	})
	req, _ := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(string(chat("scripted", ""))))
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", foreignTraceparent)
	req.Header.Set("tracestate", foreignTracestate)
	req.Header.Set("baggage", foreignBaggage)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))

	g.Eventually(spanNamed(exp, "chat scripted")).ShouldNot(BeNil())
	s := *spanNamed(exp, "chat scripted")()
	run := tracing.RunSpanContext("run-uid")
	g.Expect(s.Parent.TraceID()).To(Equal(run.TraceID()), "the run's trace, not the agent's")
	g.Expect(s.Parent.SpanID()).To(Equal(run.SpanID()))
	g.Expect(s.Links).To(HaveLen(1))
	g.Expect(s.Links[0].SpanContext.TraceID().String()).To(Equal(foreignTrace), "the agent's span is linked")
	g.Expect(s.Links[0].SpanContext.TraceState().Len()).To(BeZero())

	g.Expect(upstream).NotTo(BeNil())
	g.Expect(upstream.Get("traceparent")).To(Equal("00-"+run.TraceID().String()+"-"+s.SpanContext.SpanID().String()+"-01"),
		"the gateway's own span")
	g.Expect(upstream.Values("tracestate")).To(BeEmpty())
	g.Expect(upstream.Values("baggage")).To(BeEmpty())
	for name, values := range upstream {
		for _, v := range values {
			g.Expect(v).NotTo(Or(ContainSubstring(foreignTrace), ContainSubstring("exfil"), ContainSubstring("stolen")), name)
		}
	}
}

// With tracing off the provider gets no trace context at all: no span of
// the gateway's exists to hand on, and the agent's is not passed through.
func TestModelRequestWithoutTracingSendsTheProviderNoTraceContext(t *testing.T) {
	g := NewWithT(t)
	// As cmd/gateway starts without an endpoint: the W3C propagators
	// installed, no tracer provider.
	for _, env := range []string{tracing.EnvEndpoint, tracing.EnvTracesEndpoint, tracing.EnvTracesExporter} {
		t.Setenv(env, "")
	}
	tracing.Uninstall()
	shutdown, err := tracing.Setup(t.Context(), tracing.Options{ServiceName: "agentrun-gateway"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tracing.Enabled()).To(BeFalse())
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	e, rec := modelEnv(t, nil)
	var upstream http.Header
	inner := rec.inner
	rec.inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream = r.Header.Clone()
		inner.ServeHTTP(w, r)
	})
	req, _ := http.NewRequest(http.MethodPost, e.URL()+"/v1/chat/completions", strings.NewReader(string(chat("scripted", ""))))
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", callerTraceparent)
	req.Header.Set("tracestate", foreignTracestate)
	req.Header.Set("baggage", foreignBaggage)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(upstream).NotTo(BeNil())
	g.Expect(upstream.Values("traceparent")).To(BeEmpty())
	g.Expect(upstream.Values("tracestate")).To(BeEmpty())
	g.Expect(upstream.Values("baggage")).To(BeEmpty())
}
