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

// Package harness is the pure half of agentrun-harness, the launcher a
// harness image runs as its entrypoint (spec.harness of a ResearchRun): what
// command line, environment and configuration files point Claude Code or
// Codex at the gateway, and how its result line reads. cmd/agentrun-harness
// gathers the inputs (the attempt's view from the gateway, the pod's
// environment) and runs what this package decides.
package harness

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// MCPServer is the name the gateway's tool door has in the CLI's MCP
// configuration: Claude Code calls report.publish
// mcp__agentrun__report_publish.
const MCPServer = "agentrun"

// FinalizeMarker opens the wrap-up prompt of a finalize round (the scripted
// upstream of the tests answers it from a script's finalize turns).
const FinalizeMarker = "[agentrun:finalize]"

// Setup is what a launch is made of.
type Setup struct {
	Type v1alpha1.HarnessType
	// Gateway is the gateway's base URL; Model the policy model to ask for.
	Gateway, Model string
	// Mode is the session's permission mode when the attempt started.
	Mode v1alpha1.PermissionMode
	// Goal is the run's task.
	Goal string
	// Home is the CLI's writable home, Work its working directory.
	Home, Work string
	// CAFile is the PEM bundle that signs the gateway's certificate (the
	// pod's $AGENTRUN_GATEWAY_CA_FILE); Claude Code reads it from
	// NODE_EXTRA_CA_CERTS, which the operator sets.
	CAFile string
	// Launcher is this launcher's path: the CLI runs it to read the
	// current gateway token (`<launcher> token`), so a rotated token is
	// picked up on a long run.
	Launcher string
	// Args are the run's extra CLI arguments (spec.harness.args).
	Args []string
	// DisallowedTools are the policy's harness tools the CLI must not use.
	DisallowedTools []string
}

// Invocation is one run of the CLI.
type Invocation struct {
	// Name is the executable (looked up on PATH).
	Name string
	Args []string
	// Env is added to the launcher's environment.
	Env []string
	// Files are written (path → content) before the CLI starts.
	Files map[string]string
}

// PublishInstruction asks the CLI to publish its answer through the door.
const PublishInstruction = "You run under agentrun. When you have the final answer, publish it with the " +
	MCPServer + " MCP server's " + gatewayapi.ToolReportPublish + " tool (section: a short title; content: " +
	"the whole answer in Markdown), then stop. What you do not publish there is not delivered."

// FinalizePrompt is the prompt of a finalize round: the run's working
// budget is spent and the gateway serves this round from the output reserve.
const FinalizePrompt = FinalizeMarker + " The run's budget is exhausted: this is your last turn, served from its " +
	"output reserve. Publish your answer so far now with the " + MCPServer + " MCP server's " +
	gatewayapi.ToolReportPublish + " tool (say what is missing), and do nothing else."

// Launch is the invocation that starts the CLI on the goal. Its model
// requests declare purpose research (the Agentrun-Purpose header, which
// the CLI's subagents send too), so once the run finalizes the gateway
// refuses them (finalize_only) instead of spending the output reserve on
// work the CLI does not know is over; only the finalize round declares
// output.
func Launch(s Setup) (Invocation, error) {
	switch s.Type {
	case v1alpha1.HarnessClaudeCode:
		return claude(s, gatewayapi.PurposeResearch, []string{"-p", s.Goal, "--append-system-prompt", PublishInstruction}), nil
	case v1alpha1.HarnessCodex:
		return codex(s, gatewayapi.PurposeResearch, []string{"exec", "--skip-git-repo-check", "--json"},
			s.Goal+"\n\n"+PublishInstruction), nil
	}
	return Invocation{}, fmt.Errorf("harness %q: want %s or %s", s.Type, v1alpha1.HarnessClaudeCode, v1alpha1.HarnessCodex)
}

// Finalize is the invocation of a finalize round: the CLI's session (from
// its result) resumed with FinalizePrompt.
func Finalize(s Setup, r Result) Invocation {
	if s.Type == v1alpha1.HarnessCodex {
		args := []string{"exec", "resume", "--skip-git-repo-check", "--json"}
		if r.Session == "" {
			args = append(args, "--last")
		} else {
			args = append(args, r.Session)
		}
		return codex(s, gatewayapi.PurposeOutput, args, FinalizePrompt)
	}
	args := []string{"-p", FinalizePrompt, "--append-system-prompt", PublishInstruction}
	if r.Session != "" {
		args = append(args, "--resume", r.Session)
	} else {
		args = append(args, "--continue")
	}
	return claude(s, gatewayapi.PurposeOutput, args)
}

// claude is Claude Code headless: its JSON result, the Messages door with
// the gateway token from an apiKeyHelper (Claude Code sends it as x-api-key
// and Authorization), the tool door as its only MCP server (the token from
// a headersHelper), and the session's mode as its permission mode. Door
// tools are allowed in the CLI: the gateway decides them (mode × risk,
// approvals).
func claude(s Setup, purpose string, head []string) Invocation {
	// Claude Code runs its helpers with a shell: the launcher's path is
	// quoted.
	launcher := shellQuote(s.Launcher)
	settings, _ := json.Marshal(map[string]any{"apiKeyHelper": launcher + " token"})
	mcp, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{MCPServer: map[string]any{
		"type": "http", "url": s.Gateway + gatewayapi.MCPPath, "headersHelper": launcher + " mcp-headers",
	}}})
	args := append(head, "--output-format", "json", "--mcp-config", string(mcp), "--strict-mcp-config",
		"--allowedTools", "mcp__"+MCPServer)
	var env []string
	if s.Model != "" {
		args = append(args, "--model", s.Model)
		// Subagents and the small fast model stay on the policy's model:
		// every alias Claude Code resolves names it.
		for _, k := range []string{"CLAUDE_CODE_SUBAGENT_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
			"ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL"} {
			env = append(env, k+"="+s.Model)
		}
	}
	args = append(args, claudeMode(s.Mode)...)
	if len(s.DisallowedTools) > 0 {
		args = append(args, "--disallowedTools", strings.Join(s.DisallowedTools, ","))
	}
	args = append(args, s.Args...)
	return Invocation{
		Name: "claude",
		Args: args,
		Env: append(env,
			"HOME="+s.Home,
			gatewayapi.EnvAnthropicBaseURL+"="+s.Gateway,
			"CLAUDE_CODE_API_KEY_HELPER_TTL_MS=60000",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			// The door's tools in every request, not deferred behind a
			// tool search: the model sees what the mode allows.
			"ENABLE_TOOL_SEARCH=false",
			"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
			"ANTHROPIC_CUSTOM_HEADERS="+gatewayapi.HeaderPurpose+": "+purpose,
		),
		Files: map[string]string{filepath.Join(s.Home, ".claude", "settings.json"): string(settings)},
	}
}

// claudeMode maps a permission mode onto Claude Code's: read-only modes
// plan; Edit accepts edits; Auto and Full also run Bash (the pod is the
// sandbox). bypassPermissions is not used: Claude Code refuses it as root,
// and its denials are what the mode should keep.
func claudeMode(m v1alpha1.PermissionMode) []string {
	const flag = "--permission-mode"
	switch m {
	case v1alpha1.ModeEdit:
		return []string{flag, "acceptEdits"}
	case v1alpha1.ModeAuto, v1alpha1.ModeFull:
		return []string{flag, "acceptEdits", "--allowedTools", "Bash"}
	}
	return []string{flag, "plan"}
}

// codex is Codex CLI headless (codex exec --json): a provider at the
// Responses door whose token is read by `<launcher> token`, refreshed every
// minute; the tool door as an MCP server with the token from the
// environment (read when Codex starts); approvals never asked (the gateway
// decides door tools) and the session's mode as its sandbox.
func codex(s Setup, purpose string, head []string, prompt string) Invocation {
	var b strings.Builder
	if s.Model != "" {
		fmt.Fprintf(&b, "model = %q\n", s.Model)
	}
	fmt.Fprintf(&b, "model_provider = %q\napproval_policy = \"never\"\nsandbox_mode = %q\n\n", MCPServer, codexSandbox(s.Mode))
	fmt.Fprintf(&b, "[model_providers.%s]\nname = \"agentrun gateway\"\nbase_url = %q\nwire_api = \"responses\"\n"+
		"http_headers = { %q = %q }\n\n", MCPServer, s.Gateway+gatewayapi.ModelPathPrefix, gatewayapi.HeaderPurpose, purpose)
	fmt.Fprintf(&b, "[model_providers.%s.auth]\ncommand = %q\nargs = [\"token\"]\nrefresh_interval_ms = 60000\n\n", MCPServer, s.Launcher)
	// The door's tools are approved in Codex: the gateway decides them.
	fmt.Fprintf(&b, "[mcp_servers.%s]\nurl = %q\nbearer_token_env_var = %q\ndefault_tools_approval_mode = \"approve\"\n",
		MCPServer, s.Gateway+gatewayapi.MCPPath, EnvMCPToken)
	args := append(head, s.Args...)
	args = append(args, prompt)
	codexHome := filepath.Join(s.Home, ".codex")
	env := []string{"HOME=" + s.Home, "CODEX_HOME=" + codexHome}
	if s.CAFile != "" {
		env = append(env, "CODEX_CA_CERTIFICATE="+s.CAFile)
	}
	return Invocation{
		Name:  "codex",
		Args:  args,
		Env:   env,
		Files: map[string]string{filepath.Join(codexHome, "config.toml"): b.String()},
	}
}

// EnvMCPToken carries the gateway token to Codex's MCP client.
const EnvMCPToken = "AGENTRUN_MCP_TOKEN"

// codexSandbox maps a permission mode onto Codex's sandbox.
func codexSandbox(m v1alpha1.PermissionMode) string {
	switch m {
	case v1alpha1.ModeEdit, v1alpha1.ModeAuto:
		return "workspace-write"
	case v1alpha1.ModeFull:
		return "danger-full-access"
	}
	return "read-only"
}

// Result is what a CLI's last output line says about its run.
type Result struct {
	Harness v1alpha1.HarnessType `json:"harness"`
	// StartedAt is when the launcher started (the container's start, to
	// the millisecond): with the gateway's first model request, the CLI's
	// start-up cost.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	// ExitCode is the CLI's.
	ExitCode int `json:"exitCode"`
	// Subtype and TerminalReason are Claude Code's (success,
	// error_max_turns, …; completed, api_error, …); for Codex the last
	// event's type (turn.completed, turn.failed, error).
	Subtype        string `json:"subtype,omitempty"`
	TerminalReason string `json:"terminalReason,omitempty"`
	IsError        bool   `json:"isError,omitempty"`
	// APIErrorStatus is the HTTP status of the request that ended it.
	APIErrorStatus int `json:"apiErrorStatus,omitempty"`
	NumTurns       int `json:"numTurns,omitempty"`
	// Session resumes the CLI's conversation (Claude Code's session_id,
	// Codex's thread_id).
	Session string `json:"session,omitempty"`
	// Message is the end of the result's text or error.
	Message string `json:"message,omitempty"`
	// FinalizeRounds counts the finalize rounds run.
	FinalizeRounds int `json:"finalizeRounds,omitempty"`
	// Subagents is how many subagents Claude Code spawned (its
	// subagent_stats.spawned); their model requests went through the same
	// door, on the same attempt's grant.
	Subagents int `json:"subagents,omitempty"`
}

// maxMessage bounds Result.Message (the termination message is 4 KiB).
const maxMessage = 1024

// Read folds one line of the CLI's standard output into r: Claude Code's
// result object, or Codex's events (thread.started gives the session, the
// last turn.completed, turn.failed or error the outcome). Other lines leave
// r as it is.
func (r *Result) Read(line []byte) {
	var ev struct {
		Type           string `json:"type"`
		Subtype        string `json:"subtype"`
		TerminalReason string `json:"terminal_reason"`
		IsError        bool   `json:"is_error"`
		APIErrorStatus int    `json:"api_error_status"`
		NumTurns       int    `json:"num_turns"`
		SessionID      string `json:"session_id"`
		ThreadID       string `json:"thread_id"`
		Result         string `json:"result"`
		Message        string `json:"message"`
		Error          *struct {
			Message string `json:"message"`
		} `json:"error"`
		SubagentStats *struct {
			Spawned int `json:"spawned"`
		} `json:"subagent_stats"`
		Item *struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"item"`
	}
	if json.Unmarshal(line, &ev) != nil || ev.Type == "" {
		return
	}
	switch ev.Type {
	case "result":
		r.Subtype, r.TerminalReason, r.IsError = ev.Subtype, ev.TerminalReason, ev.IsError
		r.APIErrorStatus, r.NumTurns, r.Session = ev.APIErrorStatus, ev.NumTurns, ev.SessionID
		r.Message = clip(ev.Result)
		if ev.SubagentStats != nil {
			r.Subagents += ev.SubagentStats.Spawned
		}
	case "thread.started":
		r.Session = ev.ThreadID
	case "turn.started":
		r.NumTurns++
	case "item.completed":
		if ev.Item != nil && ev.Item.Type == "agent_message" {
			r.Message = clip(ev.Item.Text)
		}
	case "turn.completed":
		r.Subtype, r.IsError = ev.Type, false
	case "turn.failed", "error":
		r.Subtype, r.IsError = ev.Type, true
		if ev.Error != nil {
			r.Message = clip(ev.Error.Message)
		} else {
			r.Message = clip(ev.Message)
		}
	}
}

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return "…" + s[len(s)-maxMessage:]
}

// NeedsFinalize says whether to run a finalize round after the CLI exited:
// the run is finalizing (its working budget spent), nothing is published
// yet, and no round ran.
func NeedsFinalize(v gatewayapi.Attempt, r Result) bool {
	return v.Finalizing && !v.Superseded && v.Phase != v1alpha1.PhaseTerminated &&
		v.Publication.BlocksCommitted == 0 && r.FinalizeRounds == 0
}

// RefusedAtGrant says whether the CLI ended on the gateway's refusal at the
// run's working grant, or of a research request while the run finalizes
// (its error names the code).
func RefusedAtGrant(r Result) bool {
	return r.IsError && (strings.Contains(r.Message, gatewayapi.CodeGrantExhausted) ||
		strings.Contains(r.Message, gatewayapi.CodeFinalizeOnly))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
