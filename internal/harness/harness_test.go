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

package harness

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

func setup(t v1alpha1.HarnessType, mode v1alpha1.PermissionMode) Setup {
	return Setup{Type: t, Gateway: "https://gw:8443", Model: "m", Mode: mode, Goal: "do it",
		Home: "/tmp/h", Work: "/tmp/w", CAFile: "/ca.crt", DisallowedTools: []string{"WebFetch", "Bash(curl:*)"}, Launcher: "/usr/local/bin/agentrun-harness", Args: []string{"--max-turns", "9"}}
}

// after is the argument after flag in args ("" when absent).
func after(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestClaudeCodeLaunch(t *testing.T) {
	modes := map[v1alpha1.PermissionMode]string{
		v1alpha1.ModeReadOnly: "plan", v1alpha1.ModePlan: "plan", v1alpha1.ModeEdit: "acceptEdits",
		v1alpha1.ModeAuto: "acceptEdits", v1alpha1.ModeFull: "acceptEdits",
	}
	for mode, want := range modes {
		inv, err := Launch(setup(v1alpha1.HarnessClaudeCode, mode))
		if err != nil {
			t.Fatal(err)
		}
		a := inv.Args
		if inv.Name != "claude" || after(a, "-p") != "do it" || after(a, "--output-format") != "json" || after(a, "--model") != "m" {
			t.Errorf("%s: args %q", mode, a)
		}
		if got := after(a, "--permission-mode"); got != want {
			t.Errorf("%s: --permission-mode %q, want %q", mode, got, want)
		}
		bash := slices.Contains(a, "Bash")
		if bash != (mode == v1alpha1.ModeAuto || mode == v1alpha1.ModeFull) {
			t.Errorf("%s: Bash allowed = %v", mode, bash)
		}
		if !strings.Contains(after(a, "--mcp-config"), `"url":"https://gw:8443/mcp"`) ||
			!strings.Contains(after(a, "--mcp-config"), `"headersHelper":"/usr/local/bin/agentrun-harness mcp-headers"`) {
			t.Errorf("%s: --mcp-config %s", mode, after(a, "--mcp-config"))
		}
		if !strings.Contains(after(a, "--append-system-prompt"), gatewayapi.ToolReportPublish) {
			t.Errorf("%s: no publish instruction", mode)
		}
		if got := after(a, "--disallowedTools"); got != "WebFetch,Bash(curl:*)" {
			t.Errorf("%s: --disallowedTools %q", mode, got)
		}
		if a[len(a)-2] != "--max-turns" || a[len(a)-1] != "9" {
			t.Errorf("%s: the run's args are not last: %q", mode, a)
		}
		if s := inv.Files["/tmp/h/.claude/settings.json"]; s != `{"apiKeyHelper":"/usr/local/bin/agentrun-harness token"}` {
			t.Errorf("%s: settings %s", mode, s)
		}
		for _, e := range []string{"ANTHROPIC_BASE_URL=https://gw:8443", "HOME=/tmp/h", "ENABLE_TOOL_SEARCH=false",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_SUBAGENT_MODEL=m", "ANTHROPIC_DEFAULT_SONNET_MODEL=m",
			"ANTHROPIC_CUSTOM_HEADERS=Agentrun-Purpose: research"} {
			if !slices.Contains(inv.Env, e) {
				t.Errorf("%s: env lacks %s", mode, e)
			}
		}
	}
}

func TestCodexLaunch(t *testing.T) {
	modes := map[v1alpha1.PermissionMode]string{
		v1alpha1.ModeReadOnly: "read-only", v1alpha1.ModePlan: "read-only", v1alpha1.ModeEdit: "workspace-write",
		v1alpha1.ModeAuto: "workspace-write", v1alpha1.ModeFull: "danger-full-access",
	}
	for mode, want := range modes {
		inv, err := Launch(setup(v1alpha1.HarnessCodex, mode))
		if err != nil {
			t.Fatal(err)
		}
		if inv.Name != "codex" || !slices.Equal(inv.Args[:4], []string{"exec", "--skip-git-repo-check", "--json", "--max-turns"}) {
			t.Errorf("%s: args %q", mode, inv.Args)
		}
		if last := inv.Args[len(inv.Args)-1]; !strings.HasPrefix(last, "do it\n\n") || !strings.Contains(last, gatewayapi.ToolReportPublish) {
			t.Errorf("%s: prompt %q", mode, last)
		}
		cfg := inv.Files["/tmp/h/.codex/config.toml"]
		for _, line := range []string{`model = "m"`, `model_provider = "agentrun"`, `approval_policy = "never"`,
			`sandbox_mode = "` + want + `"`, `base_url = "https://gw:8443/v1"`, `wire_api = "responses"`,
			`command = "/usr/local/bin/agentrun-harness"`, `args = ["token"]`, `url = "https://gw:8443/mcp"`,
			`bearer_token_env_var = "` + EnvMCPToken + `"`, `default_tools_approval_mode = "approve"`,
			`http_headers = { "Agentrun-Purpose" = "research" }`} {
			if !strings.Contains(cfg, line+"\n") {
				t.Errorf("%s: config.toml lacks %s:\n%s", mode, line, cfg)
			}
		}
		if !slices.Contains(inv.Env, "CODEX_HOME=/tmp/h/.codex") || !slices.Contains(inv.Env, "CODEX_CA_CERTIFICATE=/ca.crt") {
			t.Errorf("%s: env %q", mode, inv.Env)
		}
	}
}

func TestLaunchRefusesAnUnknownHarness(t *testing.T) {
	if _, err := Launch(setup("Aider", v1alpha1.ModeAuto)); err == nil || !strings.Contains(err.Error(), `harness "Aider"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestFinalizeResumesTheSession(t *testing.T) {
	c := Finalize(setup(v1alpha1.HarnessClaudeCode, v1alpha1.ModeAuto), Result{Session: "s-1"})
	if after(c.Args, "--resume") != "s-1" || !strings.HasPrefix(after(c.Args, "-p"), FinalizeMarker) {
		t.Errorf("claude: %q", c.Args)
	}
	if !slices.Contains(c.Env, "ANTHROPIC_CUSTOM_HEADERS=Agentrun-Purpose: output") {
		t.Errorf("claude's finalize round is not output work: %q", c.Env)
	}
	if c = Finalize(setup(v1alpha1.HarnessClaudeCode, v1alpha1.ModeAuto), Result{}); !slices.Contains(c.Args, "--continue") {
		t.Errorf("claude without a session: %q", c.Args)
	}
	x := Finalize(setup(v1alpha1.HarnessCodex, v1alpha1.ModeAuto), Result{Session: "th-1"})
	if !slices.Equal(x.Args[:3], []string{"exec", "resume", "--skip-git-repo-check"}) || !slices.Contains(x.Args, "th-1") ||
		!strings.HasPrefix(x.Args[len(x.Args)-1], FinalizeMarker) {
		t.Errorf("codex: %q", x.Args)
	}
	for _, cfg := range x.Files {
		if !strings.Contains(cfg, `http_headers = { "Agentrun-Purpose" = "output" }`) {
			t.Errorf("codex's finalize round is not output work:\n%s", cfg)
		}
	}
}

func TestResultReadsTheCLIsLastWord(t *testing.T) {
	var c Result
	for _, l := range []string{
		`not json`,
		`{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":429,` +
			`"num_turns":3,"session_id":"s-9","result":"API Error: 429 grant_exhausted: 2/2 model requests",` +
			`"subagent_stats":{"spawned":2}}`,
	} {
		c.Read([]byte(l))
	}
	if c.Subtype != "success" || c.TerminalReason != "api_error" || !c.IsError || c.APIErrorStatus != 429 ||
		c.NumTurns != 3 || c.Session != "s-9" || !RefusedAtGrant(c) || c.Subagents != 2 {
		t.Errorf("claude: %+v", c)
	}
	var x Result
	for _, l := range []string{
		`{"type":"thread.started","thread_id":"th-1"}`, `{"type":"turn.started"}`,
		`{"type":"error","message":"{\"error\":{\"code\":\"grant_exhausted\"}}"}`,
		`{"type":"turn.failed","error":{"message":"grant_exhausted: 2/2 model requests"}}`,
	} {
		x.Read([]byte(l))
	}
	if x.Session != "th-1" || x.Subtype != "turn.failed" || !x.IsError || x.NumTurns != 1 || !RefusedAtGrant(x) {
		t.Errorf("codex: %+v", x)
	}
	x.Read([]byte(`{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Published."}}`))
	x.Read([]byte(`{"type":"turn.completed","usage":{}}`))
	if x.IsError || RefusedAtGrant(x) || x.Message != "Published." {
		t.Errorf("codex after a completed turn: %+v", x)
	}
}

func TestNeedsFinalize(t *testing.T) {
	fin := gatewayapi.Attempt{Finalizing: true, Phase: v1alpha1.PhaseFinalizing}
	cases := map[string]struct {
		v    gatewayapi.Attempt
		r    Result
		want bool
	}{
		"finalizing, nothing published": {v: fin, want: true},
		"running":                       {v: gatewayapi.Attempt{Phase: v1alpha1.PhaseRunning}},
		"already published": {v: func() gatewayapi.Attempt {
			v := fin
			v.Publication.BlocksCommitted = 1
			return v
		}()},
		"a round already ran": {v: fin, r: Result{FinalizeRounds: 1}},
		"superseded":          {v: gatewayapi.Attempt{Finalizing: true, Superseded: true}},
		"terminated":          {v: gatewayapi.Attempt{Finalizing: true, Phase: v1alpha1.PhaseTerminated}},
	}
	for name, c := range cases {
		if got := NeedsFinalize(c.v, c.r); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

func TestClaudeCodeHelpersSurviveAPathWithSpaces(t *testing.T) {
	s := setup(v1alpha1.HarnessClaudeCode, v1alpha1.ModeAuto)
	s.Launcher = "/opt/my tools/agent's-harness"
	inv, err := Launch(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `'/opt/my tools/agent'\\''s-harness' token`
	if got := inv.Files["/tmp/h/.claude/settings.json"]; !strings.Contains(got, want) {
		t.Errorf("settings %s, want the helper %s", got, want)
	}
}
