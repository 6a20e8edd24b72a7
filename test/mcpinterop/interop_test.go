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

// Package mcpinterop runs the official MCP clients (the Python SDK, mcp on
// PyPI, and the TypeScript SDK, @modelcontextprotocol/sdk on npm) against a
// real gateway tool door, at each protocol revision the door announces. The
// clients are installed by hack/test-clients.sh, which runs these tests; a
// plain go test skips them.
package mcpinterop

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/toolserver"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Environment variables hack/test-clients.sh sets.
const (
	envPython = "AGENTRUN_MCP_PYTHON" // the python of a venv with test/mcpinterop/python/requirements.txt
	envNode   = "AGENTRUN_MCP_NODE"   // node, with test/mcpinterop/ts/node_modules installed
)

// callResult is a tools/call result as a client script reports it.
type callResult struct {
	IsError bool           `json:"isError"`
	Text    string         `json:"text"`
	Meta    map[string]any `json:"meta"`
	Error   string         `json:"error"`
}

// report is what a client script prints.
type report struct {
	Skip            string          `json:"skip"`
	ProtocolVersion string          `json:"protocolVersion"`
	Tools           json.RawMessage `json:"tools"`
	Call            callResult      `json:"call"`
	Refused         callResult      `json:"refused"`
	Approval        callResult      `json:"approval"`
	Timeout         callResult      `json:"timeout"`
}

// announced are the revisions the door lists in supportedVersions: it does
// not narrow the Go SDK's list (ServerOptions.SupportedProtocolVersions).
func announced() []string { return mcp.SupportedProtocolVersions() }

// doorEnv starts a gateway whose attempt has a tool server with search
// (answers) and ticket.create (never answers; the door gives up after the
// server's timeout), and the built-in report.publish (High risk: waits for
// approval, which the test gives).
func doorEnv(t *testing.T) *gatewaytest.Env {
	f, err := toolserver.NewFake(
		toolserver.ToolSpec{Name: "search", Description: "search the web", InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}, "required": []any{"q"},
		}},
		toolserver.ToolSpec{Name: "ticket.create", Behavior: toolserver.Behavior{Hang: true}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s, err := toolserver.New(toolserver.Options{Fake: f})
	if err != nil {
		t.Fatal(err)
	}
	up := newServer(t, s)
	t.Cleanup(f.Close)
	e := gatewaytest.Start(t, gatewaytest.Options{Mutate: func(ra *v1alpha1.RunAttempt) {
		p := &ra.Spec.Policy
		p.ToolServers = []v1alpha1.ToolServer{{Name: "tools", URL: up + toolserver.PathMCP,
			Timeout: &metav1.Duration{Duration: 500 * time.Millisecond}}}
		p.Tools = append(p.Tools,
			v1alpha1.Tool{Name: "search", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone, Server: "tools"},
			v1alpha1.Tool{Name: "ticket.create", Risk: v1alpha1.RiskMedium, Effect: v1alpha1.EffectExternal, Server: "tools"},
		)
		p.AutoApprove = append(p.AutoApprove, "ticket.create")
		p.ApprovalTimeout = &metav1.Duration{Duration: 20 * time.Second}
	}})
	e.ApproveToolWhenAsked(gatewayapi.ToolReportPublish)
	return e
}

func TestPythonSDK(t *testing.T) {
	py := os.Getenv(envPython)
	if py == "" {
		t.Skip(envPython + " is not set: hack/test-clients.sh installs the Python SDK and runs this test")
	}
	runClient(t, py, filepath.Join("python", "client.py"))
}

func TestTypeScriptSDK(t *testing.T) {
	node := os.Getenv(envNode)
	if node == "" {
		t.Skip(envNode + " is not set: hack/test-clients.sh installs the TypeScript SDK and runs this test")
	}
	runClient(t, node, filepath.Join("ts", "client.mjs"))
}

// runClient runs a client script against a fresh door at each announced
// revision and checks every scenario.
func runClient(t *testing.T, interpreter, script string) {
	for _, rev := range announced() {
		t.Run(rev, func(t *testing.T) {
			g := NewWithT(t)
			e := doorEnv(t)
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, interpreter, script, e.URL()+gatewayapi.MCPPath, gatewaytest.Token, rev)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", interpreter, script, err, stdout.String(), stderr.String())
			}
			var r report
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatalf("%s printed no report: %v\nstdout: %s\nstderr: %s", script, err, stdout.String(), stderr.String())
			}
			if r.Skip != "" {
				t.Skip(r.Skip)
			}
			g.Expect(r.ProtocolVersion).To(Equal(rev), "negotiated")
			g.Expect(string(r.Tools)).To(MatchJSON(`["notes.write","report.publish","search","ticket.create"]`), "tools/list")

			g.Expect(r.Call.Error).To(BeEmpty())
			g.Expect(r.Call.IsError).To(BeFalse(), r.Call.Text)
			g.Expect(r.Call.Text).To(ContainSubstring("vector databases"))
			g.Expect(r.Call.Meta).To(HaveKeyWithValue(gatewayapi.MetaCallID, HavePrefix("call-")))

			g.Expect(r.Refused.Error).To(BeEmpty(), "a refusal is a tool result, not a protocol error")
			g.Expect(r.Refused.IsError).To(BeTrue())
			g.Expect(r.Refused.Text).To(ContainSubstring(gatewayapi.CodeUnknownTool))
			g.Expect(r.Refused.Meta).To(HaveKeyWithValue(gatewayapi.MetaCode, gatewayapi.CodeUnknownTool))

			g.Expect(r.Approval.Error).To(BeEmpty())
			g.Expect(r.Approval.IsError).To(BeFalse(), r.Approval.Text)
			g.Expect(r.Approval.Text).To(ContainSubstring(`published section "Overview"`))

			g.Expect(r.Timeout.Error).To(BeEmpty())
			g.Expect(r.Timeout.IsError).To(BeTrue())
			g.Expect(r.Timeout.Text).To(ContainSubstring(gatewayapi.CodeOutcomeUnknown))

			g.Expect(e.Status().Usage.ToolCalls).To(BeNumerically(">=", 2), "the door counted what it dispatched")
		})
	}
}
