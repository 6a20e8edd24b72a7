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

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's Prometheus metrics. Labels are namespace, policy
// and model at most: never a run (unbounded cardinality).
// Label names of the gateway's metrics.
const (
	labelNamespace = "namespace"
	labelPolicy    = "policy"
	labelOutcome   = "outcome"
)

type metrics struct {
	modelRequests      *prometheus.CounterVec
	tokens             *prometheus.CounterVec
	refusals           *prometheus.CounterVec
	upstreamSeconds    *prometheus.HistogramVec
	addedSeconds       prometheus.Histogram
	apiSeconds         *prometheus.HistogramVec
	statusWrites       *prometheus.CounterVec
	statusWriteSeconds prometheus.Histogram
	toolCalls          *prometheus.CounterVec
	toolSeconds        *prometheus.HistogramVec
	securityDegraded   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		modelRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_model_requests_total",
			Help: "Model requests dispatched upstream, by namespace, policy, model and outcome (ok, upstream_error, error, stream_cut).",
		}, []string{labelNamespace, labelPolicy, fieldModel, labelOutcome}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_tokens_total",
			Help: "Tokens charged to attempts (as the provider reported them, or as reserved when it reported none).",
		}, []string{labelNamespace, labelPolicy, fieldModel}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_refusals_total",
			Help: "Requests the gateway refused, by namespace, policy and error code.",
		}, []string{labelNamespace, labelPolicy, "code"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_upstream_seconds",
			Help:    "Time from dispatch to the provider's last byte, by model.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{fieldModel}),
		addedSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_added_seconds",
			Help:    "Time the gateway adds to a model request (total minus upstream).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		apiSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_request_seconds",
			Help:    "Time to serve a gateway request, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_status_writes_total",
			Help: "RunAttempt status writes, by result (ok, conflict, error).",
		}, []string{"result"}),
		statusWriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_status_write_seconds",
			Help:    "Latency of RunAttempt status writes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_tool_calls_total",
			Help: "Tool calls answered by the MCP door, by namespace, policy, tool and outcome (ok, tool_error, unknown, refused).",
		}, []string{labelNamespace, labelPolicy, "tool", labelOutcome}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_tool_server_seconds",
			Help:    "Time from dispatch to a tool server's answer, by server and outcome (ok, tool_error, no_answer).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"server", labelOutcome}),
		securityDegraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentrun_gateway_security_degraded",
			Help: "1 while a policy's runs are held to its stricter posture (spec.onSecurityDegraded), else 0.",
		}, []string{labelNamespace, labelPolicy}),
	}
	for _, c := range []prometheus.Collector{m.modelRequests, m.tokens, m.refusals, m.upstreamSeconds,
		m.addedSeconds, m.apiSeconds, m.statusWrites, m.statusWriteSeconds, m.toolCalls, m.toolSeconds, m.securityDegraded} {
		_ = reg.Register(c)
	}
	return m
}
