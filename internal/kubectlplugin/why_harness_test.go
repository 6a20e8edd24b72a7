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

package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// A harness run's why shows the CLI's result line from the attempt pod's
// termination message: its exit, subtype and terminal reason.
func TestWhyShowsTheHarnessResult(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rr := &v1alpha1.ResearchRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"}}
	rr.Spec.Harness = &v1alpha1.Harness{Type: v1alpha1.HarnessClaudeCode}
	rr.Status.Attempt = 1
	ra := &v1alpha1.RunAttempt{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: runpod.Name("r", 1)}}
	ra.Spec.RunName, ra.Spec.Attempt, ra.Spec.PodName = "r", 1, runpod.Name("r", 1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: runpod.Name("r", 1)}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: runpod.HarnessContainer, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: `{"harness":"ClaudeCode","exitCode":1,` +
			`"subtype":"success","terminalReason":"api_error","isError":true,"apiErrorStatus":429,"numTurns":3,` +
			`"message":"API Error: Request rejected (429) · grant_exhausted","finalizeRounds":1}`}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rr, ra, pod).Build()

	var out bytes.Buffer
	if err := Why(context.Background(), &out, c, WhyOptions{Namespace: "team", Name: "r", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	want := "ClaudeCode exited 1; success, api_error, API error 429; 3 turns; 1 finalize round: " +
		"API Error: Request rejected (429) · grant_exhausted"
	if !strings.Contains(out.String(), want) {
		t.Errorf("want %q in:\n%s", want, out.String())
	}
}
