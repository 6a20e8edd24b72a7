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

package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an interceptor invocation, the outcome label of
// agentrun_agent_interceptor_seconds.
const (
	// OutcomeOK: the hook returned no error.
	OutcomeOK = "ok"
	// OutcomeError: the hook failed (its posture decided what happened next).
	OutcomeError = "error"
	// OutcomeVeto: a Pre hook with veto rights vetoed the call.
	OutcomeVeto = "veto"
	// OutcomeVetoIgnored: a hook without veto rights tried to veto; ignored.
	OutcomeVetoIgnored = "veto_ignored"
	// OutcomeResent: a buffered output was resent successfully.
	OutcomeResent = "resent"
)

const labelInterceptor = "interceptor"

type metrics struct {
	interceptorSeconds *prometheus.HistogramVec
	interceptorErrors  *prometheus.CounterVec
	buffered           *prometheus.GaugeVec
	refusals           *prometheus.CounterVec
	calls              *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		interceptorSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentrun_agent_interceptor_seconds",
			Help: "Latency of each interceptor hook invocation, by interceptor and outcome " +
				"(ok, error, veto, veto_ignored, resent).",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5},
		}, []string{labelInterceptor, "outcome"}),
		interceptorErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_agent_interceptor_errors_total",
			Help: "Interceptor failures, by interceptor and posture (Deny: the call was denied; Allow: logged and continued).",
		}, []string{labelInterceptor, "posture"}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentrun_agent_interceptor_buffered",
			Help: "Failed outputs of buffered interceptors waiting to be resent.",
		}, []string{labelInterceptor}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_agent_refusals_total",
			Help: "Refused calls (by the gateway, or by a fail-closed interceptor), by fault kind.",
		}, []string{"kind"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_agent_calls_total",
			Help: "Dispatched model requests and tool calls, by kind and name.",
		}, []string{"kind", "name"}),
	}
	reg.MustRegister(m.interceptorSeconds, m.interceptorErrors, m.buffered, m.refusals, m.calls)
	return m
}
