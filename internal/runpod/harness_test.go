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
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func harnessRun(h *v1alpha1.Harness, containers ...corev1.Container) *v1alpha1.ResearchRun {
	run := newRun(func(t *corev1.PodTemplateSpec) { t.Spec.Containers = containers })
	run.Spec.Harness = h
	return run
}

func TestBuildHarnessAddsTheAgentContainer(t *testing.T) {
	gw := Gateway{URL: "https://gw:8443"}
	pod, err := Build(harnessRun(&v1alpha1.Harness{Type: v1alpha1.HarnessClaudeCode, Model: "sonnet"}), 1, testRunner, gw)
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("containers: %+v", pod.Spec.Containers)
	}
	c := pod.Spec.Containers[0]
	if c.Name != HarnessContainer || c.Image != DefaultHarnessImages[v1alpha1.HarnessClaudeCode] ||
		!slices.Equal(c.Command, []string{HarnessLauncher}) || c.Args != nil {
		t.Errorf("container: %+v", c)
	}
	if c.TerminationMessagePath != corev1.TerminationMessagePathDefault ||
		c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination message: %s %s", c.TerminationMessagePath, c.TerminationMessagePolicy)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env[EnvHarness] != "ClaudeCode" || env[EnvHarnessModel] != "sonnet" || env[EnvTerminationLog] != "/dev/termination-log" ||
		env["ANTHROPIC_BASE_URL"] != "https://gw:8443" {
		t.Errorf("env: %v", env)
	}
	// Hardened like any attempt container: the pod is the harness's sandbox.
	if sc := c.SecurityContext; !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation {
		t.Errorf("security context: %+v", sc)
	}
	if *pod.Spec.AutomountServiceAccountToken {
		t.Error("the harness's pod holds an API token")
	}
}

func TestBuildHarnessKeepsTheTemplatesAgentAdditions(t *testing.T) {
	h := &v1alpha1.Harness{Type: v1alpha1.HarnessCodex, Image: "registry.example/codex:1", Args: []string{"--oss"}}
	pod, err := Build(harnessRun(h,
		corev1.Container{Name: "sidecar", Image: helperImage},
		corev1.Container{Name: HarnessContainer, Env: []corev1.EnvVar{{Name: "FOO", Value: "bar"}, {Name: EnvHarness, Value: "Mine"}}},
	), 1, testRunner, Gateway{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[1]
	if c.Name != HarnessContainer || c.Image != "registry.example/codex:1" || !slices.Equal(c.Args, []string{"--", "--oss"}) {
		t.Errorf("container: %+v", c)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FOO" }) ||
		slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Value == "Mine" }) {
		t.Errorf("env: %+v (the template's own kept, the harness's names the harness's)", c.Env)
	}
}

func TestBuildHarnessRefusesWhatItOwns(t *testing.T) {
	_, err := Build(harnessRun(&v1alpha1.Harness{Type: v1alpha1.HarnessCodex},
		corev1.Container{Name: HarnessContainer, Image: "mine", Command: []string{"sh"}}), 1, testRunner, Gateway{})
	var te *TemplateError
	if !errors.As(err, &te) || len(te.Errors) != 2 {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"spec.template.spec.containers[0].image", "spec.template.spec.containers[0].command"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
}
