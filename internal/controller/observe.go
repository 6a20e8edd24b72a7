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
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/lifecycle"
	"github.com/agentrun-dev/agentrun/internal/tracing"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// A run's trace (internal/tracing): its trace ID is the run's UID. Every
// phase the run leaves is a span "ResearchRun <phase>" from the time it
// entered the phase to the time it left, a child of the run's root span
// "ResearchRun <namespace>/<name>" (creation to completion, ended when the
// run is Terminated). The spans are built from the status alone — no span
// is held open across reconciles — so a restarted or new leader emits the
// rest of a run's trace. Attempt pods get the root span as TRACEPARENT
// (internal/runpod), so the gateway's model and tool spans are its children.

const operatorTracer = "agentrun.dev/operator"

// observeTransition records what a successful status write changed from
// before to after: the span of the phase the run left (and, once it is
// Terminated, the run's root span), and the queue-wait, run-duration and
// approval-wait histograms. Writes that change no phase and decide no
// approval record nothing, so calling it after every write is safe.
func observeTransition(ctx context.Context, before, after *v1alpha1.ResearchRun) {
	observeTransitionAt(ctx, before, after, time.Now())
}

// The reconciler calls observeTransition after its status write (apply).
var _ = observeTransition

func observeTransitionAt(ctx context.Context, before, after *v1alpha1.ResearchRun, now time.Time) {
	observeApprovals(before, after, now)
	from, to := phaseOf(before), phaseOf(after)
	if from == to {
		return
	}
	left := timeOr(enteredAt(after, to), now)
	if from == v1alpha1.PhaseQueued && after.Status.QueuedTime != nil {
		outcome := "started"
		if to == v1alpha1.PhaseTerminated {
			outcome = "ended"
		}
		queueWait.WithLabelValues(outcome).Observe(left.Sub(after.Status.QueuedTime.Time).Seconds())
	}
	if to == v1alpha1.PhaseTerminated {
		start := after.CreationTimestamp.Time
		if after.Status.StartTime != nil {
			start = after.Status.StartTime.Time
		}
		runDuration.WithLabelValues(string(after.Status.Reason)).Observe(left.Sub(start).Seconds())
	}
	if !tracing.Enabled() || after.UID == "" {
		return
	}
	tr := otel.Tracer(operatorTracer)
	parent := trace.ContextWithRemoteSpanContext(ctx, tracing.RunSpanContext(after.UID))
	_, span := tr.Start(parent, "ResearchRun "+string(from), trace.WithTimestamp(timeOr(phaseSince(before, from), left)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(append(runAttributes(after),
			attribute.String("agentrun.phase", string(from)), attribute.String("agentrun.phase.next", string(to)),
			attribute.Int("agentrun.attempt", int(before.Status.Attempt)))...))
	span.AddEvent("transition", trace.WithTimestamp(left), trace.WithAttributes(
		attribute.String("agentrun.phase", string(to)), attribute.String("agentrun.reason", string(after.Status.Reason)),
		attribute.String("agentrun.message", textutil.Truncate(after.Status.Message, 512))))
	span.End(trace.WithTimestamp(left))
	if to != v1alpha1.PhaseTerminated {
		return
	}
	// The root span, with the IDs every other span of the run names.
	root := tracing.WithRootIDs(context.WithoutCancel(ctx), tracing.RunTraceID(after.UID), tracing.RunSpanID(after.UID))
	health := lifecycle.RunHealth(to, after.Status.Reason, after.Status.Settlement)
	_, rs := tr.Start(root, "ResearchRun "+after.Namespace+"/"+after.Name, trace.WithNewRoot(),
		trace.WithTimestamp(after.CreationTimestamp.Time), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(runAttributes(after),
			attribute.String("agentrun.reason", string(after.Status.Reason)),
			attribute.String("agentrun.settlement", string(after.Status.Settlement)),
			attribute.String("agentrun.health", string(health)),
			attribute.Int("agentrun.attempts", int(after.Status.Attempt)),
			attribute.Int64("agentrun.steps", after.Status.Steps))...))
	if health == lifecycle.HealthFailed {
		rs.SetStatus(codes.Error, string(after.Status.Reason))
	}
	rs.End(trace.WithTimestamp(left))
}

// observeApprovals observes the wait of every approval request before had
// and after no longer has, with the decision spec.approvals holds for it
// (None: it expired, was withdrawn or the run ended first).
func observeApprovals(before, after *v1alpha1.ResearchRun, now time.Time) {
	for _, req := range before.Status.PendingApprovals {
		if req.RequestedAt == nil || pending(after, req.ActionID) {
			continue
		}
		decision, at := "None", now
		for _, a := range after.Spec.Approvals {
			if a.ActionID == req.ActionID {
				decision = string(a.Decision)
				if a.Time != nil {
					at = a.Time.Time
				}
			}
		}
		approvalWait.WithLabelValues(decision).Observe(max(at.Sub(req.RequestedAt.Time), 0).Seconds())
	}
}

func pending(run *v1alpha1.ResearchRun, action string) bool {
	for _, r := range run.Status.PendingApprovals {
		if r.ActionID == action {
			return true
		}
	}
	return false
}

func runAttributes(run *v1alpha1.ResearchRun) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("agentrun.namespace", run.Namespace), attribute.String("agentrun.run", run.Name),
		attribute.String("agentrun.session", run.Spec.SessionRef.Name),
	}
}

func phaseOf(run *v1alpha1.ResearchRun) v1alpha1.Phase {
	if run.Status.Phase == "" {
		return v1alpha1.PhasePending
	}
	return run.Status.Phase
}

// enteredAt is when the status says run entered phase p (nil if it does
// not say).
func enteredAt(run *v1alpha1.ResearchRun, p v1alpha1.Phase) *metav1.Time {
	switch p {
	case v1alpha1.PhasePending:
		return &run.CreationTimestamp
	case v1alpha1.PhaseQueued:
		return run.Status.QueuedTime
	case v1alpha1.PhaseFinalizing:
		return run.Status.FinalizingTime
	case v1alpha1.PhaseTerminated:
		return run.Status.CompletionTime
	case v1alpha1.PhaseRecovering:
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionRecovering); c != nil &&
			c.Status == metav1.ConditionTrue {
			return &c.LastTransitionTime
		}
	case v1alpha1.PhaseRunning:
		// Running again after a recovery: since Recovering went False.
		t := run.Status.StartTime
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionRecovering); c != nil &&
			c.Status == metav1.ConditionFalse && (t == nil || c.LastTransitionTime.After(t.Time)) {
			t = &c.LastTransitionTime
		}
		return t
	}
	return nil
}

// phaseSince is when run (as it was before a transition) entered phase p.
func phaseSince(run *v1alpha1.ResearchRun, p v1alpha1.Phase) *metav1.Time {
	if t := enteredAt(run, p); t != nil && !t.IsZero() {
		return t
	}
	return &run.CreationTimestamp
}

func timeOr(t *metav1.Time, fallback time.Time) time.Time {
	if t == nil || t.IsZero() {
		return fallback
	}
	return t.Time
}
