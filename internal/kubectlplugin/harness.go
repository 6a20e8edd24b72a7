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
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/harness"
	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// harnessText is the Harness row of a run with spec.harness: the CLI's
// result line, as agentrun-harness wrote it to the attempt pod's
// termination message ("" for a run without a harness).
func harnessText(ctx context.Context, c client.Reader, rr *v1alpha1.ResearchRun, a *v1alpha1.RunAttempt) string {
	h := rr.Spec.Harness
	if h == nil {
		return ""
	}
	if a == nil || a.Spec.PodName == "" {
		return string(h.Type) + " (no pod yet)"
	}
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: rr.Namespace, Name: a.Spec.PodName}, &pod); err != nil {
		return fmt.Sprintf("%s (pod %s not readable: %v)", h.Type, a.Spec.PodName, err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != runpod.HarnessContainer {
			continue
		}
		t := cs.State.Terminated
		if t == nil {
			return string(h.Type) + " (running)"
		}
		var r harness.Result
		if json.Unmarshal([]byte(t.Message), &r) != nil || r.Harness == "" {
			return fmt.Sprintf("%s exited %d, without a result line (its log's tail: %s)", h.Type, t.ExitCode,
				dash(strings.TrimSpace(lastLine(t.Message))))
		}
		return resultText(r)
	}
	return string(h.Type) + " (not started)"
}

// resultText reads a harness result: its exit, Claude Code's subtype and
// terminal reason (Codex's last event), turns, finalize rounds and message.
func resultText(r harness.Result) string {
	parts := []string{fmt.Sprintf("%s exited %d", r.Harness, r.ExitCode)}
	var what []string
	for _, s := range []string{r.Subtype, r.TerminalReason} {
		if s != "" {
			what = append(what, s)
		}
	}
	if r.APIErrorStatus != 0 {
		what = append(what, fmt.Sprintf("API error %d", r.APIErrorStatus))
	}
	if len(what) > 0 {
		parts = append(parts, strings.Join(what, ", "))
	}
	if r.NumTurns > 0 {
		parts = append(parts, fmt.Sprintf("%d turns", r.NumTurns))
	}
	if r.FinalizeRounds > 0 {
		parts = append(parts, fmt.Sprintf("%d finalize round", r.FinalizeRounds))
	}
	s := strings.Join(parts, "; ")
	if r.Message != "" {
		s += ": " + lastLine(r.Message)
	}
	return s
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
