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
package controller

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
)

// Metrics served on the manager's metrics endpoint.
var (
	runTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_run_phase_transitions_total",
		Help: "ResearchRun phase transitions decided by the termination owner, by the phase entered.",
	}, []string{"phase"})
	runTerminations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_run_terminations_total",
		Help: "ResearchRuns that reached Terminated, by reason and settlement.",
	}, []string{"reason", "settlement"})
	attemptsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "agentrun_attempts_started_total",
		Help: "RunAttempts created (first attempts and recoveries).",
	})
	factToDecision = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "agentrun_fact_to_decision_seconds",
		Help:    "Time from a fact arriving (RunAttempt or pod event) to the decision that acted on it being written.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	})
	queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentrun_run_queue_wait_seconds",
		Help:    "Time a ResearchRun waited in its session's queue, by how it left it (started, ended: QueueTimeout or a stop).",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 16),
	}, []string{"outcome"})
	runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentrun_run_duration_seconds",
		Help:    "Time from a ResearchRun's start (leaving the queue; creation if it never started) to Terminated, by reason.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"reason"})
	approvalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentrun_approval_wait_seconds",
		Help:    "Time from a tool call's approval request to its decision, by decision (Approve, Deny, None: expired, withdrawn or the run ended).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	}, []string{"decision"})
	conflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentrun_controller_conflicts_total",
		Help: "Status writes refused because the object changed since it was read (optimistic-lock conflicts), by resource; each pass is retried from fresh cache contents.",
	}, []string{"resource"})
)

var runsByPhaseDesc = prometheus.NewDesc("agentrun_runs", "ResearchRuns in the operator's cache, by phase.", []string{"phase"}, nil)

// phaseCollector counts runs by phase from the informer cache at scrape time,
// so the gauge is right after a restart and costs nothing between scrapes.
// Only the leader reports it: every replica has the same cache, and a sum
// over replicas would count each run once per replica.
type phaseCollector struct {
	reader  client.Reader
	elected <-chan struct{}
}

func (c phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- runsByPhaseDesc }

func (c phaseCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return // a standby replica
	}
	list := &v1alpha1.ResearchRunList{}
	if err := c.reader.List(context.Background(), list); err != nil {
		return
	}
	counts := map[v1alpha1.Phase]int{}
	for i := range list.Items {
		p := list.Items[i].Status.Phase
		if p == "" {
			p = v1alpha1.PhasePending
		}
		counts[p]++
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseQueued, v1alpha1.PhaseRunning, v1alpha1.PhaseRecovering, v1alpha1.PhaseFinalizing, v1alpha1.PhaseTerminated} {
		ch <- prometheus.MustNewConstMetric(runsByPhaseDesc, prometheus.GaugeValue, float64(counts[p]), string(p))
	}
}

// registerPhaseCollector registers the runs-by-phase gauge once per process;
// it reports once elected is closed (the manager's Elected: at once without
// leader election).
func registerPhaseCollector(reader client.Reader, elected <-chan struct{}) {
	phaseCollectorOnce.Do(func() { metrics.Registry.MustRegister(phaseCollector{reader: reader, elected: elected}) })
}

var phaseCollectorOnce sync.Once

func init() {
	metrics.Registry.MustRegister(Collectors()...)
}

// Collectors are the operator's own metrics as registered on the manager's
// registry (the runs-by-phase gauge's description included), for tests
// that check what a dashboard or an alert names.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{runTransitions, runTerminations, attemptsStarted, factToDecision, conflicts,
		queueWait, runDuration, approvalWait}
}

// PhaseCollectorDesc describes agentrun_runs (registered once the manager
// has a cache: registerPhaseCollector).
func PhaseCollectorDesc() *prometheus.Desc { return runsByPhaseDesc }

// observeDecision records the metrics of an applied decision.
func observeDecision(run *v1alpha1.ResearchRun, d lifecycle.Decision, waited time.Duration, hadFact bool) {
	if hadFact {
		factToDecision.Observe(waited.Seconds())
	}
	if d.Status.Phase == run.Status.Phase {
		return
	}
	runTransitions.WithLabelValues(string(d.Status.Phase)).Inc()
	if d.Status.Phase == v1alpha1.PhaseTerminated {
		runTerminations.WithLabelValues(string(d.Status.Reason), string(d.Status.Settlement)).Inc()
	}
}
