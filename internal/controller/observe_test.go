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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/tracing"
)

func histogramOf(t *testing.T, h *prometheus.HistogramVec, label string) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := h.WithLabelValues(label).(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// A run's life, written status by status: every phase it leaves is a span
// under the run's root span, the root span (its IDs the ones attempt pods
// get as TRACEPARENT) ends with the run, and the queue wait, the run's
// duration and the approval's wait are observed once each.
func TestObserveTransitionTracesAndTimesARunsLife(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	defer tracing.Uninstall()
	queueWait.Reset()
	runDuration.Reset()
	approvalWait.Reset()

	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) *metav1.Time { return &metav1.Time{Time: t0.Add(time.Duration(s) * time.Second)} }
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "digest",
		UID: "5d0c3f6e-9a41-4b6e-8f2e-0c1d2e3f4a5b", CreationTimestamp: *at(0)},
		Spec: v1alpha1.ResearchRunSpec{SessionRef: v1alpha1.LocalObjectReference{Name: "weekly"}}}
	steps := []func(s *v1alpha1.ResearchRunStatus){
		func(s *v1alpha1.ResearchRunStatus) { s.Phase, s.QueuedTime = v1alpha1.PhaseQueued, at(1) },
		func(s *v1alpha1.ResearchRunStatus) {
			s.Phase, s.StartTime, s.Attempt = v1alpha1.PhaseRunning, at(31), 1
		},
		func(s *v1alpha1.ResearchRunStatus) {
			s.PendingApprovals = []v1alpha1.ApprovalRequest{{ActionID: "a1", Tool: "report.publish", RequestedAt: at(40)}}
		},
		func(s *v1alpha1.ResearchRunStatus) { s.PendingApprovals = nil },
		func(s *v1alpha1.ResearchRunStatus) {
			s.Phase, s.FinalizingTime, s.Reason = v1alpha1.PhaseFinalizing, at(100), v1alpha1.ReasonBudgetExhausted
		},
		func(s *v1alpha1.ResearchRunStatus) {
			s.Phase, s.CompletionTime, s.Settlement = v1alpha1.PhaseTerminated, at(130), v1alpha1.SettlementNone
		},
	}
	for i, step := range steps {
		next := run.DeepCopy()
		step(&next.Status)
		if i == 3 {
			next.Spec.Approvals = []v1alpha1.Approval{{ActionID: "a1", Decision: v1alpha1.DecisionApprove, Time: at(52)}}
		}
		observeTransitionAt(context.Background(), run, next, t0.Add(time.Hour))
		run = next
	}

	spans := exp.GetSpans()
	want := []struct {
		name       string
		start, end int
	}{
		{"ResearchRun Pending", 0, 1}, {"ResearchRun Queued", 1, 31}, {"ResearchRun Running", 31, 100},
		{"ResearchRun Finalizing", 100, 130}, {"ResearchRun team-a/digest", 0, 130},
	}
	if len(spans) != len(want) {
		t.Fatalf("got %d spans %v, want %d (one per phase left, then the root)", len(spans), spans.Snapshots(), len(want))
	}
	root := tracing.RunSpanContext(run.UID)
	for i, w := range want {
		s := spans[i]
		if s.Name != w.name || !s.StartTime.Equal(at(w.start).Time) || !s.EndTime.Equal(at(w.end).Time) {
			t.Errorf("span %d: %s [%s, %s], want %s [%ds, %ds]", i, s.Name, s.StartTime, s.EndTime, w.name, w.start, w.end)
		}
		if s.SpanContext.TraceID() != root.TraceID() {
			t.Errorf("span %s: trace %s, want the run's %s", s.Name, s.SpanContext.TraceID(), root.TraceID())
		}
		if i < 4 && s.Parent.SpanID() != root.SpanID() {
			t.Errorf("span %s: parent %s, want the run's root span %s", s.Name, s.Parent.SpanID(), root.SpanID())
		}
	}
	rs := spans[4]
	if rs.SpanContext.SpanID() != root.SpanID() || rs.Parent.IsValid() {
		t.Errorf("root span: id %s parent %v, want id %s and no parent", rs.SpanContext.SpanID(), rs.Parent, root.SpanID())
	}
	if rs.Status.Code != codes.Error {
		t.Errorf("a budget-exhausted run that delivered nothing: root span status %v, want Error", rs.Status)
	}
	if n, sum := histogramOf(t, queueWait, "started"); n != 1 || sum != 30 {
		t.Errorf("queue wait: %d observations, sum %v; want 1 of 30s", n, sum)
	}
	if n, sum := histogramOf(t, runDuration, string(v1alpha1.ReasonBudgetExhausted)); n != 1 || sum != 99 {
		t.Errorf("run duration: %d observations, sum %v; want 1 of 99s (start to completion)", n, sum)
	}
	if n, sum := histogramOf(t, approvalWait, "Approve"); n != 1 || sum != 12 {
		t.Errorf("approval wait: %d observations, sum %v; want 1 of 12s", n, sum)
	}
	if n := testutil.CollectAndCount(approvalWait); n != 1 {
		t.Errorf("approval wait: %d series, want 1", n)
	}
}

// Without tracing nothing is exported and no TRACEPARENT is handed out, but
// the histograms are observed all the same.
func TestObserveTransitionWithoutTracing(t *testing.T) {
	tracing.Uninstall()
	runDuration.Reset()
	run := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{UID: "u", Namespace: "n", Name: "r"},
		Status: v1alpha1.ResearchRunStatus{Phase: v1alpha1.PhaseRunning}}
	next := run.DeepCopy()
	next.Status.Phase, next.Status.Reason = v1alpha1.PhaseTerminated, v1alpha1.ReasonCompleted
	observeTransitionAt(context.Background(), run, next, time.Now())
	if tp := tracing.RunTraceparent(run.UID); tp != "" {
		t.Errorf("TRACEPARENT %q without tracing", tp)
	}
	if n, _ := histogramOf(t, runDuration, string(v1alpha1.ReasonCompleted)); n != 1 {
		t.Errorf("run duration: %d observations, want 1", n)
	}
}
