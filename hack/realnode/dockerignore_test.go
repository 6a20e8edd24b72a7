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
	"os"
	"path/filepath"
	"testing"
)

// The repository's .dockerignore, read as Docker reads it, keeps the Go source, the module files
// and what the images' source embeds, and leaves out tests, docs and everything else: the Docker
// build of agentrun-stream failed on the missing web page until it was re-included.
func TestRepositoryDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	rules, err := parseDockerignore(f)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"go.mod":                                  false,
		"cmd/gateway/main.go":                     false,
		"internal/stream/web/static/index.html":   false,
		"internal/stream/web/web_test.go":         true,
		"docs/realnode.md":                        true,
		"config/samples/agentrun_v1alpha1_x.yaml": true,
		"Dockerfile":                              true,
	} {
		if got := excluded(rules, path); got != want {
			t.Errorf("excluded(%s) = %v, want %v", path, got, want)
		}
	}
}
