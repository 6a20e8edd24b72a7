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
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// metrics are the gateway's Prometheus metrics. Labels are namespace, policy
// and model at most: never a run (unbounded cardinality). The usage by
// session (agentrun_gateway_session_*) is bounded by MaxSessionSeries.
// Label names of the gateway's metrics.
const (
	labelNamespace = "namespace"
	labelPolicy    = "policy"
	labelOutcome   = "outcome"
	// labelPart is the part of a reservation: prompt or completion.
	labelPart    = "part"
	labelSession = "session"
	labelCode    = "code"
	labelResult  = "result"
	// labelDoor is the model door a request came through.
	labelDoor = "door"
)

// MaxSessionSeries bounds the (namespace, session) pairs the usage-by-session
// metrics have series for, per gateway process: later sessions are counted
// under session OtherSessions (and agentrun_gateway_session_overflow_total).
// Set it before New (the gateway's --max-session-series).
var MaxSessionSeries = 1000

// OtherSessions is the session label of the usage of sessions beyond
// MaxSessionSeries.
const OtherSessions = "_other"

type metrics struct {
	modelRequests      *prometheus.CounterVec
	tokens             *prometheus.CounterVec
	reserved           *prometheus.CounterVec
	cost               *prometheus.CounterVec
	refusals           *prometheus.CounterVec
	upstreamSeconds    *prometheus.HistogramVec
	addedSeconds       *prometheus.HistogramVec
	apiSeconds         *prometheus.HistogramVec
	statusWrites       *prometheus.CounterVec
	statusWriteSeconds prometheus.Histogram
	// statusWritesSkipped counts writes not made: the API server held
	// every fact already.
	statusWritesSkipped prometheus.Counter
	// tooLarge counts answers beyond a size bound, by what
	// (model, model_stream_line, tool).
	tooLarge         *prometheus.CounterVec
	toolCalls        *prometheus.CounterVec
	toolSeconds      *prometheus.HistogramVec
	securityDegraded *prometheus.GaugeVec
	streamDropped    *prometheus.CounterVec
	// authorityHolds counts calls held for an unreachable interceptor
	// authority, by how the hold ended (recovered, expired).
	authorityHolds *prometheus.CounterVec

	sessionRequests, sessionTokens, sessionTools, sessionRefusals *prometheus.CounterVec
	sessionOverflow                                               prometheus.Counter

	sessionsMu sync.Mutex
	sessions   map[[2]string]struct{}
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
		reserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_reserved_tokens_total",
			Help: "Tokens reserved against attempts' token grants before dispatch, by part: prompt (the prompt's bound) and " +
				"completion (the completion caps forwarded); beside agentrun_gateway_tokens_total, how tight the reservation is.",
		}, []string{labelNamespace, labelPolicy, fieldModel, labelPart}),
		cost: newCostMetric(),
		streamDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_stream_budget_dropped_total",
			Help: "Run-stream deltas dropped because their attempt streamed more than its policy's spec.events.maxBytes, by namespace and policy.",
		}, []string{labelNamespace, labelPolicy}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_refusals_total",
			Help: "Requests the gateway refused, by namespace, policy and error code.",
		}, []string{labelNamespace, labelPolicy, labelCode}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_upstream_seconds",
			Help:    "Time from dispatch to the provider's last byte, by model.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{fieldModel}),
		addedSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentrun_gateway_added_seconds",
			Help: "Time the gateway adds to a model request, by door (chat, responses, messages): from its arrival " +
				"to its dispatch, plus from the provider's last byte to the answer's end (added.go).",
			Buckets: addedBuckets,
		}, []string{labelDoor}),
		apiSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_request_seconds",
			Help:    "Time to serve a gateway request, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_status_writes_total",
			Help: "RunAttempt status writes, by result (ok, conflict, error).",
		}, []string{labelResult}),
		statusWriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_status_write_seconds",
			Help:    "Latency of RunAttempt status writes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		statusWritesSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_gateway_status_writes_skipped_total",
			Help: "RunAttempt status writes not made because the status last written already said everything (a repeated finish, an escalation already durable).",
		}),
		tooLarge: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_answers_too_large_total",
			Help: "Answers the gateway would not hold because they exceed a bound, by what: model (--max-model-response-bytes), model_stream_line, tool (--max-tool-result-bytes).",
		}, []string{"what"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_tool_calls_total",
			Help: "Tool calls answered by the MCP door, by namespace, policy, tool and outcome (ok, tool_error, unknown, refused).",
		}, []string{labelNamespace, labelPolicy, "tool", labelOutcome}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_tool_server_seconds",
			Help:    "Time from dispatch to a tool server's answer, by server and outcome (ok, tool_error, no_answer).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"server", labelOutcome}),
		authorityHolds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_authority_holds_total",
			Help: "Calls held while a fail-closed interceptor's authority was unreachable (spec.authorityWait), " +
				"by result: recovered (checked again and decided) or expired (answered interceptor_unavailable).",
		}, []string{labelResult}),
		securityDegraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentrun_gateway_security_degraded",
			Help: "1 while a policy's runs are held to its stricter posture (spec.onSecurityDegraded), else 0.",
		}, []string{labelNamespace, labelPolicy}),
	}
	bySession := []string{labelNamespace, labelSession, labelPolicy}
	m.sessionRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_session_model_requests_total",
		Help: "Model requests dispatched upstream, by namespace, session and policy (bounded: see --max-session-series).",
	}, bySession)
	m.sessionTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_session_tokens_total",
		Help: "Tokens charged to attempts, by namespace, session and policy.",
	}, bySession)
	m.sessionTools = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_session_tool_calls_total",
		Help: "Tool calls answered by the MCP door, by namespace, session and policy.",
	}, bySession)
	m.sessionRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_gateway_session_refusals_total",
		Help: "Requests of an attempt the gateway refused, by namespace, session, policy and error code.",
	}, []string{labelNamespace, labelSession, labelPolicy, labelCode})
	m.sessionOverflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentrun_gateway_session_overflow_total",
		Help: "Usage counts folded into session \"" + OtherSessions + "\" because --max-session-series sessions have series.",
	})
	m.sessions = map[[2]string]struct{}{}
	for _, c := range []prometheus.Collector{m.modelRequests, m.tokens, m.reserved, m.cost, m.refusals, m.streamDropped, m.upstreamSeconds,
		m.addedSeconds, m.apiSeconds, m.statusWrites, m.statusWriteSeconds, m.statusWritesSkipped, m.tooLarge,
		m.toolCalls, m.toolSeconds, m.securityDegraded, m.authorityHolds,
		m.sessionRequests, m.sessionTokens, m.sessionTools, m.sessionRefusals, m.sessionOverflow} {
		_ = reg.Register(c)
	}
	return m
}

// sessionLabels are the usage-by-session labels of k's attempt: its
// namespace, its session (OtherSessions past MaxSessionSeries) and its
// policy. The caller must not hold k.mu.
func (m *metrics) sessionLabels(k *keeper) []string {
	k.mu.Lock()
	ns, session, policy := k.key.Namespace, k.obj.Labels[v1alpha1.LabelSession], k.obj.Spec.Policy.Name
	k.mu.Unlock()
	key := [2]string{ns, session}
	m.sessionsMu.Lock()
	if _, ok := m.sessions[key]; !ok {
		if len(m.sessions) >= MaxSessionSeries {
			session = OtherSessions
			m.sessionOverflow.Inc()
		} else {
			m.sessions[key] = struct{}{}
		}
	}
	m.sessionsMu.Unlock()
	return []string{ns, session, policy}
}

// sessionModelRequest counts one dispatched model request and its tokens.
func (m *metrics) sessionModelRequest(k *keeper, tokens int64) {
	l := m.sessionLabels(k)
	m.sessionRequests.WithLabelValues(l...).Inc()
	m.sessionTokens.WithLabelValues(l...).Add(float64(tokens))
}

// sessionToolCall counts one tool call the door answered.
func (m *metrics) sessionToolCall(k *keeper) {
	m.sessionTools.WithLabelValues(m.sessionLabels(k)...).Inc()
}

// sessionRefusal counts one refusal of k's attempt.
func (m *metrics) sessionRefusal(k *keeper, code string) {
	m.sessionRefusals.WithLabelValues(append(m.sessionLabels(k), code)...).Inc()
}
