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

package runpod

import (
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"

	"github.com/agentrun-dev/agentrun/internal/tracing"
)

func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// With tracing on, every container of an attempt pod gets TRACEPARENT: the
// run's root span, so the gateway's spans of the attempt join the run's
// trace. Without tracing there is none.
func TestBuildHandsTheRunsTraceToTheAttempt(t *testing.T) {
	run := newRun(nil)
	run.UID = "5d0c3f6e-9a41-4b6e-8f2e-0c1d2e3f4a5b"
	tracing.Uninstall()
	pod, err := Build(run, 1, testRunner, testGateway)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := envValue(pod.Spec.Containers[0], tracing.EnvTraceparent); ok {
		t.Fatalf("TRACEPARENT=%q without tracing", v)
	}

	tracing.Install(noop.NewTracerProvider())
	defer tracing.Uninstall()
	pod, err = Build(run, 1, testRunner, testGateway)
	if err != nil {
		t.Fatal(err)
	}
	sc := tracing.RunSpanContext(run.UID)
	want := "00-5d0c3f6e9a414b6e8f2e0c1d2e3f4a5b-" + sc.SpanID().String() + "-01"
	for _, c := range pod.Spec.Containers {
		if v, _ := envValue(c, tracing.EnvTraceparent); v != want {
			t.Errorf("container %s: TRACEPARENT=%q, want %q", c.Name, v, want)
		}
	}
}
