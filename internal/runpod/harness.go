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
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

const (
	// HarnessContainer is the name of the container a harness adds.
	HarnessContainer = "agent"
	// HarnessLauncher is the harness launcher's path in a harness image.
	HarnessLauncher = "/usr/local/bin/agentrun-harness"
	// EnvHarness, EnvHarnessModel and EnvTerminationLog tell the launcher
	// the CLI, the policy model it asks for and where its result line goes
	// (the container's terminationMessagePath).
	EnvHarness        = "AGENTRUN_HARNESS"
	EnvHarnessModel   = "AGENTRUN_HARNESS_MODEL"
	EnvTerminationLog = "AGENTRUN_TERMINATION_LOG"
)

// DefaultHarnessImages are the images a harness runs when spec.harness.image
// is unset: built from the repository's Dockerfile.harness, each pinning its
// CLI (docs/harnesses.md).
var DefaultHarnessImages = map[v1alpha1.HarnessType]string{
	v1alpha1.HarnessClaudeCode: "ghcr.io/agentrun-dev/agentrun-harness-claude-code:2.1.328",
	v1alpha1.HarnessCodex:      "ghcr.io/agentrun-dev/agentrun-harness-codex:0.169.0",
}

// HarnessImage is the image a harness runs.
func HarnessImage(h *v1alpha1.Harness) string {
	if h.Image != "" {
		return h.Image
	}
	return DefaultHarnessImages[h.Type]
}

// addHarness makes the template's agent container (HarnessContainer) the
// harness's: its image, command and args are the harness's, so a template
// container of that name may add env, resources and mounts but not set
// those (an error naming the field); without one, the container is added
// first.
func addHarness(tmpl *corev1.PodTemplateSpec, h *v1alpha1.Harness) field.ErrorList {
	if h == nil {
		return nil
	}
	cs := field.NewPath("spec", "template", "spec", "containers")
	i := slices.IndexFunc(tmpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == HarnessContainer })
	if i < 0 {
		tmpl.Spec.Containers = append([]corev1.Container{{Name: HarnessContainer}}, tmpl.Spec.Containers...)
		i = 0
	}
	c := &tmpl.Spec.Containers[i]
	const owned = "is set by spec.harness for the harness's container"
	var errs field.ErrorList
	if c.Image != "" {
		errs = append(errs, field.Forbidden(cs.Index(i).Child("image"), owned+" (spec.harness.image)"))
	}
	if len(c.Command) > 0 {
		errs = append(errs, field.Forbidden(cs.Index(i).Child("command"), owned))
	}
	if len(c.Args) > 0 {
		errs = append(errs, field.Forbidden(cs.Index(i).Child("args"), owned+" (spec.harness.args)"))
	}
	if len(errs) > 0 {
		return errs
	}
	c.Image, c.Command = HarnessImage(h), []string{HarnessLauncher}
	if len(h.Args) > 0 {
		c.Args = append([]string{"--"}, h.Args...)
	}
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	env := []corev1.EnvVar{
		{Name: EnvHarness, Value: string(h.Type)},
		{Name: EnvTerminationLog, Value: corev1.TerminationMessagePathDefault},
	}
	if h.Model != "" {
		env = append(env, corev1.EnvVar{Name: EnvHarnessModel, Value: h.Model})
	}
	c.Env = append(env, slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		return slices.ContainsFunc(env, func(h corev1.EnvVar) bool { return h.Name == e.Name })
	})...)
	return nil
}
