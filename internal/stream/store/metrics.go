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

package store

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the store's and the producer's Prometheus metrics. No label
// names a run (unbounded cardinality).
type Metrics struct {
	Published      *prometheus.CounterVec
	PublishErrors  prometheus.Counter
	SeqConflicts   prometheus.Counter
	ProducerDrops  *prometheus.CounterVec
	ProducerMerges prometheus.Counter
	ProducerQueued prometheus.Gauge
	Trimmed        prometheus.Counter
}

// Kinds of event in metric labels.
const (
	kindFinal = "final"
	kindDelta = "delta"
)

func kindOf(delta bool) string {
	if delta {
		return kindDelta
	}
	return kindFinal
}

// NewMetrics makes the metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_stream_published_total",
			Help: "Run-stream events stored in JetStream, by kind (final, delta).",
		}, []string{"kind"}),
		PublishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_publish_errors_total",
			Help: "Run-stream publishes that failed (NATS unreachable, timeout, refused).",
		}),
		SeqConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_seq_conflicts_total",
			Help: "Publishes that found another producer had taken the run's next seq, and took the one after.",
		}),
		ProducerDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_stream_producer_dropped_total",
			Help: "Events the producer's buffer dropped while the store was unreachable, by kind (delta first; final only when the buffer held nothing else).",
		}, []string{"kind"}),
		ProducerMerges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_producer_merged_total",
			Help: "Deltas the producer's full buffer merged into the delta before them (no text lost).",
		}),
		ProducerQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentrun_stream_producer_buffered",
			Help: "Events waiting in the producer's buffer.",
		}),
		Trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_trimmed_total",
			Help: "Run-stream events removed because their run exceeded its policy's spec.events.maxBytes (the oldest first).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.PublishErrors, m.SeqConflicts, m.ProducerDrops, m.ProducerMerges, m.ProducerQueued, m.Trimmed)
	}
	return m
}
