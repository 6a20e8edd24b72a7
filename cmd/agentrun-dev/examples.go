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

package main

import (
	"context"
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
)

// --examples adds the example agents on the official OpenAI and Anthropic
// SDKs, the OpenAI Agents SDKs and the Python SDK (cmd/agentrun-dev/examples)
// to the samples: a run of each model door.
var withExampleRuns = flag.Bool("examples", false,
	"also run the example agents, a run of each model door: chat (openai, npm and PyPI), Responses "+
		"(@openai/agents, openai-agents), Messages (@anthropic-ai/sdk, anthropic), the Python SDK "+
		"and the coding harnesses Claude Code and Codex (spec.harness) "+
		"(installs their pinned dependencies with hack/test-clients.sh --setup)")

//go:embed examples/*.yaml
var builtinExamples embed.FS

// withExamples appends the example objects to objs when --examples is set,
// after installing the examples' dependencies.
func withExamples(ctx context.Context, objs []*unstructured.Unstructured, root, upstream string) (
	[]*unstructured.Unstructured, error) {
	if !*withExampleRuns {
		return objs, nil
	}
	fmt.Println("==> installing the examples' pinned dependencies (hack/test-clients.sh --setup)")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "test-clients.sh"), "--setup")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("--examples: hack/test-clients.sh --setup: %w", err)
	}
	vars := map[string]string{
		"AGENTRUN_DEV_UPSTREAM": upstream,
		"AGENTRUN_REPO":         root,
		"AGENTRUN_PYTHON":       filepath.Join(root, "bin", "venv", "bin", "python"),
		// The harnesses' CLIs (examples/harnesses, pinned) on PATH.
		"AGENTRUN_HARNESS_PATH": filepath.Join(root, "examples", "harnesses", "node_modules", ".bin") +
			":" + os.Getenv("PATH"),
	}
	names, err := fs.Glob(builtinExamples, "examples/*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for _, name := range names {
		data, err := fs.ReadFile(builtinExamples, name)
		if err != nil {
			return nil, err
		}
		s := string(data)
		for k, v := range vars {
			s = strings.ReplaceAll(s, "${"+k+"}", v)
		}
		more, err := stack.DecodeYAML([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, u := range more {
			if u.GetKind() == "ResearchRun" {
				exampleRuns = append(exampleRuns, u.GetName())
			}
		}
		objs = append(objs, more...)
	}
	return objs, nil
}

// exampleRuns are the names of --examples' runs (namespace default).
var exampleRuns []string

// showExampleOutput prints the last lines each example run's agent printed
// (its first attempt's container log under dir/pods; shown names dir in the
// heading), so a run of each door shows what its client saw.
func showExampleOutput(dir, shown string, lines int) {
	if len(exampleRuns) == 0 {
		return
	}
	fmt.Printf("==> what the example agents printed (last %d lines of %s/pods/default_<run>-1_*/agent.log)\n",
		lines, shown)
	for _, name := range exampleRuns {
		logs, _ := filepath.Glob(filepath.Join(dir, "pods", "default_"+name+"-1_*", "agent.log"))
		if len(logs) == 0 {
			fmt.Printf("    %-28s (no log)\n", name)
			continue
		}
		data, err := os.ReadFile(logs[0])
		if err != nil {
			fmt.Printf("    %-28s %v\n", name, err)
			continue
		}
		out := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		for i, line := range out[max(0, len(out)-lines):] {
			label := ""
			if i == 0 {
				label = name
			}
			fmt.Printf("    %-28s %s\n", label, line)
		}
	}
}
