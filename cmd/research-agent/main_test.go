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
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// runCaptured runs the command with args and returns its exit code and
// what it wrote to stderr.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := run(args)
	os.Stderr = stderr
	_ = w.Close()
	return code, <-out
}

// noGatewayEnv clears what the operator sets on an attempt container.
func noGatewayEnv(t *testing.T) {
	for _, v := range []string{gatewayapi.EnvGatewayURL, gatewayapi.EnvTokenFile, gatewayapi.EnvCAFile, "AGENTRUN_SCRIPT"} {
		t.Setenv(v, "")
	}
}

func TestFlagsAndExitCodes(t *testing.T) {
	noGatewayEnv(t)
	if code, _ := runCaptured(t, "-h"); code != 0 {
		t.Errorf("-h exits %d, want 0", code)
	}
	if code, _ := runCaptured(t, "--no-such-flag"); code != 2 {
		t.Errorf("an unknown flag exits %d, want 2", code)
	}
	// No gateway to talk to: a clear error naming what to set, exit 1.
	code, stderr := runCaptured(t, "--provider=scripted", "--script=/nonexistent", "--flush-interval=3s")
	if code != 1 {
		t.Errorf("no gateway config exits %d, want 1", code)
	}
	for _, want := range []string{"$" + gatewayapi.EnvGatewayURL, "--gateway-url", "$" + gatewayapi.EnvTokenFile, "--token-file"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the error does not say %q:\n%s", want, stderr)
		}
	}
}

// The flags configure a whole run against a gateway: its URL, the token
// file, the script, and the deprecated --flush-interval, accepted and
// ignored (the gateway coalesces writes).
func TestRunsFromFlags(t *testing.T) {
	noGatewayEnv(t)
	// The finalization publishes the section from the notes: approved up front.
	id, err := gatewayapi.ActionIDOf(gatewayapi.ToolReportPublish, map[string]any{"section": "Summary", "content": "raft wins"})
	if err != nil {
		t.Fatal(err)
	}
	e := gatewaytest.Start(t, gatewaytest.Options{})
	e.ApproveWhenAsked(id)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(token, []byte(gatewaytest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(`
plan: [Summary]
turns:
- tools: [{name: notes.write, args: {section: Summary, text: "raft wins"}}]
  tokens: 12
- finish: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stderr := runCaptured(t,
		"--gateway-url="+e.URL(), "--token-file="+token,
		"--provider=scripted", "--script="+script, "--model="+gatewaytest.Model,
		"--flush-interval=5s", "--http-allow=example.org,*.example.com", "--max-retries=1", "--retry-backoff=1ms")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	s := e.Status()
	if !s.FinishProposed || !s.Publication.Settled || s.Publication.Settlement != v1alpha1.SettlementComplete {
		t.Errorf("finish %t, publication %+v; want proposed, settled Complete", s.FinishProposed, s.Publication)
	}
	if s.Usage.ModelRequests != 4 || s.Usage.Tokens != 12 {
		t.Errorf("usage %+v; want 4 model requests (plan, 2 turns, finalization) and 12 tokens", s.Usage)
	}
}
