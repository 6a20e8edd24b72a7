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
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

func TestFlagsAndExitCodes(t *testing.T) {
	t.Setenv(v1alpha1.EnvNamespace, "")
	t.Setenv(v1alpha1.EnvRunAttempt, "")
	t.Setenv(v1alpha1.EnvRun, "")
	t.Setenv(agent.EnvKubeconfig, "")
	if code := run([]string{"-h"}); code != 0 {
		t.Errorf("-h exits %d, want 0", code)
	}
	if code := run([]string{"--no-such-flag"}); code != 2 {
		t.Errorf("an unknown flag exits %d, want 2", code)
	}
	// No RunAttempt to work on: a clear error, exit 1.
	if code := run([]string{"--provider=scripted", "--script=/nonexistent"}); code != 1 {
		t.Errorf("no RunAttempt exits %d, want 1", code)
	}
}
