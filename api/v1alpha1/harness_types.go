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

package v1alpha1

// HarnessType names a coding agent CLI the operator knows how to run.
// +kubebuilder:validation:Enum=ClaudeCode;Codex
type HarnessType string

const (
	// HarnessClaudeCode is Claude Code (npm @anthropic-ai/claude-code),
	// headless (claude -p), on the gateway's Anthropic Messages door.
	HarnessClaudeCode HarnessType = "ClaudeCode"
	// HarnessCodex is Codex CLI (npm @openai/codex), headless (codex exec),
	// on the gateway's Responses door.
	HarnessCodex HarnessType = "Codex"
)

// HarnessPolicy is a RuntimePolicy's rules for coding harnesses.
type HarnessPolicy struct {
	// disallowedTools are the harness's own tools (not door tools) its CLI
	// must not use, in Claude Code's permission rule syntax (e.g. WebFetch,
	// Bash(curl:*)): passed to Claude Code as --disallowedTools. Codex has
	// no per-tool list: its sandbox (from the session's mode) is its
	// control.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	// +optional
	DisallowedTools []string `json:"disallowedTools,omitempty"`
}

// Harness runs a coding agent CLI as the run's agent. The operator adds
// the attempt pod's agent container from it: the image's harness launcher
// (agentrun-harness) points the CLI's model provider and MCP server at the
// gateway with the pod's gateway token (re-read as it rotates), maps the
// session's permission mode onto the CLI's own flags, hands it spec.goal
// with an instruction to publish its answer through the report.publish door
// tool, and keeps the CLI's result line as the container's termination
// message.
type Harness struct {
	// type is the CLI: ClaudeCode or Codex.
	// +required
	Type HarnessType `json:"type"`
	// image has the CLI and agentrun-harness. Unset: the documented
	// default image of the type (docs/harnesses.md), which pins the CLI.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// model is the name of the policy model (spec.models[].name) the CLI
	// asks for. Unset: the policy's first model.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Model string `json:"model,omitempty"`
	// args are more arguments for the CLI, after the ones the launcher
	// sets (e.g. --max-turns 20 for Claude Code).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`
}
