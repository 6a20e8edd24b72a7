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

// Package tracing sets up OpenTelemetry tracing for agentrun's binaries: an
// OTLP exporter (off unless an endpoint is configured), the W3C trace-context
// propagator, and the deterministic trace of a ResearchRun (its trace ID is
// the run's UID, its root span ID a hash of it), so the operator's
// lifecycle spans and the gateway's model and tool spans of one run land in
// one trace without any state shared between the processes.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
)

// Environment variables of the OpenTelemetry specification that Setup reads
// (the OTLP exporters read the rest: headers, certificates, timeouts).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	// EnvTraceparent is the variable an attempt pod's containers get: the
	// W3C traceparent of their run's trace, which the SDKs forward to the
	// gateway as the traceparent header.
	EnvTraceparent = "TRACEPARENT"
)

// enabled is set by Setup (or Install) once spans are exported.
var enabled atomic.Bool

// Enabled reports whether this process exports spans.
func Enabled() bool { return enabled.Load() }

// Options configure Setup.
type Options struct {
	// ServiceName is the resource's service.name (agentrun-operator,
	// agentrun-gateway).
	ServiceName string
	// Endpoint overrides OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT: a URL
	// (http://collector:4318, https://..., or host:port for gRPC).
	Endpoint string
	// Protocol overrides OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: grpc or
	// http/protobuf (the specification's default).
	Protocol string
}

// Setup installs the W3C propagator always (also in a process that does not
// trace; the gateway does not use it upstream, it hands providers only its
// own spans) and, when an endpoint is configured (flag
// or environment) or OTEL_TRACES_EXPORTER is console, a batching tracer
// provider. It returns the provider's shutdown (flushes the last spans); a
// no-op when tracing is off.
func Setup(ctx context.Context, o Options) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	exp, err := exporter(ctx, o)
	if err != nil || exp == nil {
		return func(context.Context) error { return nil }, err
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(o.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("tracing: building the resource: %w", err)
	}
	tp := NewProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// NewProvider is an SDK tracer provider with agentrun's ID generator (a run's
// root span gets its deterministic IDs); tests pass an in-memory exporter
// with sdktrace.WithSyncer.
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithIDGenerator(idGenerator{})}, opts...)...)
}

// Install makes tp the global tracer provider, sets the W3C propagator and
// marks tracing enabled.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	enabled.Store(true)
}

// Uninstall restores the no-op provider (tests).
func Uninstall() {
	otel.SetTracerProvider(noop.NewTracerProvider())
	enabled.Store(false)
}

func exporter(ctx context.Context, o Options) (sdktrace.SpanExporter, error) {
	kind := strings.ToLower(os.Getenv(EnvTracesExporter))
	switch kind {
	case "none":
		return nil, nil
	case "console":
		return stdouttrace.New(stdouttrace.WithPrettyPrint())
	case "", "otlp":
	default:
		return nil, fmt.Errorf("tracing: %s=%q is not supported (otlp, console or none)", EnvTracesExporter, kind)
	}
	endpoint := firstNonEmpty(o.Endpoint, os.Getenv(EnvTracesEndpoint), os.Getenv(EnvEndpoint))
	if endpoint == "" {
		return nil, nil
	}
	proto := firstNonEmpty(o.Protocol, os.Getenv(EnvTracesProtocol), os.Getenv(EnvProtocol), "http/protobuf")
	hasScheme := strings.Contains(endpoint, "://")
	switch proto {
	case "grpc":
		var opts []otlptracegrpc.Option
		if o.Endpoint != "" {
			if hasScheme {
				opts = append(opts, otlptracegrpc.WithEndpointURL(o.Endpoint))
			} else {
				opts = append(opts, otlptracegrpc.WithEndpoint(o.Endpoint))
			}
		}
		return otlptracegrpc.New(ctx, opts...)
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if o.Endpoint != "" {
			if !hasScheme {
				return nil, fmt.Errorf("tracing: --otlp-endpoint %q: http/protobuf needs a URL (http://host:4318)", o.Endpoint)
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(o.Endpoint, "/")+"/v1/traces"))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (grpc or http/protobuf)", proto)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// RunTraceID is the trace ID of a run: its UID's 16 bytes (a hash when the
// UID is not a UUID).
func RunTraceID(uid types.UID) trace.TraceID {
	var id trace.TraceID
	if u, err := uuid.Parse(string(uid)); err == nil {
		copy(id[:], u[:])
		return id
	}
	sum := sha256.Sum256([]byte("trace/" + uid))
	copy(id[:], sum[:])
	return id
}

// RunSpanID is the span ID of a run's root span, which the operator ends
// when the run is Terminated and every other span of the run descends from.
func RunSpanID(uid types.UID) trace.SpanID {
	var id trace.SpanID
	sum := sha256.Sum256([]byte("span/" + uid))
	copy(id[:], sum[:])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// RunSpanContext is the remote parent of a run's spans: its root span.
func RunSpanContext(uid types.UID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: RunTraceID(uid), SpanID: RunSpanID(uid), TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

// RunTraceparent is the W3C traceparent naming a run's root span, or "" when
// this process does not trace (nothing would be exported under it).
func RunTraceparent(uid types.UID) string {
	if !Enabled() || uid == "" {
		return ""
	}
	sc := RunSpanContext(uid)
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// WithRootIDs marks ctx so that a root span started from it gets these IDs
// (a run's root span); spans started from ctx's descendants get random IDs.
func WithRootIDs(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, rootIDsKey{}, rootIDs{tid, sid})
}

type rootIDsKey struct{}

type rootIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// idGenerator is the SDK's ID generator but for a root span whose context
// names its IDs (WithRootIDs).
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if r, ok := ctx.Value(rootIDsKey{}).(rootIDs); ok && r.trace.IsValid() && r.span.IsValid() {
		return r.trace, r.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}
