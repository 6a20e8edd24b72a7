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

package chain

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Outcomes of one hook call (label outcome of
// agentrun_gateway_interceptor_calls_total).
const (
	OutcomeOK          = "ok"
	OutcomeError       = "error"
	OutcomeVeto        = "veto"
	OutcomeVetoIgnored = "veto_ignored"
	OutcomePanic       = "panic"
)

type observer = prometheus.Observer

const labelInterceptor = "interceptor"

// Metrics are the chain's Prometheus metrics, shared by every Chain of a
// gateway. Labels are the interceptor's name, its phase and the call kind:
// never a run or a tool (unbounded cardinality).
type Metrics struct {
	seconds  *prometheus.HistogramVec
	calls    *prometheus.CounterVec
	denials  *prometheus.CounterVec
	added    *prometheus.HistogramVec
	resends  *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	buffered *prometheus.GaugeVec
	full     *prometheus.CounterVec
}

// NewMetrics creates the chain's metrics and registers them on reg (nil:
// not registered). Registering twice on one registry reuses the metrics
// already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_interceptor_seconds",
			Help:    "Time one interceptor hook takes, by interceptor and phase.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 20),
		}, []string{labelInterceptor, "phase"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_interceptor_calls_total",
			Help: "Interceptor hook calls, by interceptor and outcome (ok, error, veto, veto_ignored, panic).",
		}, []string{labelInterceptor, "outcome"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_interceptor_denials_total",
			Help: "Calls an interceptor refused (a veto, or an error or panic under onError Deny), by interceptor.",
		}, []string{labelInterceptor}),
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentrun_gateway_interceptor_chain_added_seconds",
			Help:    "Time the interceptor chain adds to a call (total minus dispatch), by call kind.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 20),
		}, []string{"kind"}),
		resends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_interceptor_resends_total",
			Help: "Buffered outputs of fail-open interceptors delivered on a resend, by interceptor.",
		}, []string{labelInterceptor}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_interceptor_dropped_total",
			Help: "Buffered outputs dropped (buffer full, or still undelivered at Close), by interceptor.",
		}, []string{labelInterceptor}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentrun_gateway_interceptor_buffered",
			Help: "Outputs of fail-open interceptors waiting to be resent, by interceptor.",
		}, []string{labelInterceptor}),
		full: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_interceptor_queue_full_total",
			Help: "Calls whose output an interceptor could not queue for its writer (queue full), by interceptor; " +
				"handled by its onError: dropped or buffered (Allow), or the call refused (Deny).",
		}, []string{labelInterceptor}),
	}
	if reg == nil {
		return m
	}
	m.seconds = register(reg, m.seconds)
	m.calls = register(reg, m.calls)
	m.denials = register(reg, m.denials)
	m.added = register(reg, m.added)
	m.resends = register(reg, m.resends)
	m.dropped = register(reg, m.dropped)
	m.buffered = register(reg, m.buffered)
	m.full = register(reg, m.full)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// linkMetrics are one chain entry's metrics, resolved once in New so a call
// does no label lookups.
type linkMetrics struct {
	seconds                             observer
	ok, err, veto, vetoIgnored, panicky prometheus.Counter
	denials, resends, dropped           prometheus.Counter
	buffered                            prometheus.Gauge
	queueFull                           prometheus.Counter
}

func (m *Metrics) forLink(name string, phase v1alpha1.InterceptorPhase) linkMetrics {
	return linkMetrics{
		seconds:     m.seconds.WithLabelValues(name, string(phase)),
		ok:          m.calls.WithLabelValues(name, OutcomeOK),
		err:         m.calls.WithLabelValues(name, OutcomeError),
		veto:        m.calls.WithLabelValues(name, OutcomeVeto),
		vetoIgnored: m.calls.WithLabelValues(name, OutcomeVetoIgnored),
		panicky:     m.calls.WithLabelValues(name, OutcomePanic),
		denials:     m.denials.WithLabelValues(name),
		resends:     m.resends.WithLabelValues(name),
		dropped:     m.dropped.WithLabelValues(name),
		buffered:    m.buffered.WithLabelValues(name),
		queueFull:   m.full.WithLabelValues(name),
	}
}

// observe times and counts one hook call ending with *err, and tells the
// chain's observer (WithObserver) its outcome.
func (l *link) observe(start time.Time, kind Kind, err *error) {
	l.m.seconds.Observe(time.Since(start).Seconds())
	outcome := outcomeOf(*err, l.canVeto)
	switch outcome {
	case OutcomeOK:
		l.m.ok.Inc()
	case OutcomePanic:
		l.m.panicky.Inc()
	case OutcomeVeto:
		l.m.veto.Inc()
	case OutcomeVetoIgnored:
		l.m.vetoIgnored.Inc()
	default:
		l.m.err.Inc()
	}
	if l.obs != nil {
		l.obs(Observation{Kind: kind, Interceptor: l.spec.Name, Class: l.spec.Class, Phase: l.spec.Phase, Outcome: outcome})
	}
}

func outcomeOf(e error, canVeto bool) string {
	if e == nil {
		return OutcomeOK
	}
	if _, ok := e.(errPanic); ok {
		return OutcomePanic
	}
	if _, ok := errors.AsType[*VetoError](e); ok {
		if canVeto {
			return OutcomeVeto
		}
		return OutcomeVetoIgnored
	}
	return OutcomeError
}
