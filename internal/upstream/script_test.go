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

package upstream

import (
	"encoding/json"
	"testing"
)

func TestPromptedTurn(t *testing.T) {
	script := PromptScript(Script{
		Turns: []Turn{
			{Tools: []ToolCall{{ID: "t1", Name: "report.publish", Arguments: map[string]any{"title": "a"}}}},
			{Say: "done"},
		},
		Finalize: []Turn{{Say: "wrapped up"}},
	})
	task := func(s string) string { q, _ := json.Marshal("Do it. " + s); return string(q) }
	msgTools := `"tools":[{"name":"Bash"},{"name":"mcp__agentrun__report_publish"}]`
	respTools := `"tools":[{"type":"function","name":"agentrun__report_publish"}]`
	nsTools := `"tools":[{"type":"function","name":"exec_command"},{"type":"namespace","name":"mcp__agentrun",` +
		`"tools":[{"type":"function","name":"notes_write"},{"type":"function","name":"report_publish"}]}]`
	cases := map[string]struct {
		body      string
		say       string
		tool      string
		namespace string
		noScript  bool
	}{
		"Messages, first turn: the tool by its harness's name": {
			body: `{"messages":[{"role":"user","content":[{"type":"text","text":` + task(script) + `}]}],` + msgTools + `}`,
			tool: "mcp__agentrun__report_publish"},
		"Messages, after one assistant turn": {
			body: `{"messages":[{"role":"user","content":` + task(script) + `},{"role":"assistant","content":[]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}],` + msgTools + `}`,
			say: "done"},
		"Messages, past the script": {
			body: `{"messages":[{"role":"user","content":` + task(script) + `},{"role":"assistant","content":[]},` +
				`{"role":"user","content":"x"},{"role":"assistant","content":[]},{"role":"user","content":"y"}],` + msgTools + `}`,
			noScript: true},
		"Messages, the finalize turns after the marker": {
			body: `{"messages":[{"role":"user","content":` + task(script) + `},{"role":"assistant","content":[]},` +
				`{"role":"user","content":` + task(FinalizeMarker+" publish now") + `}],` + msgTools + `}`,
			say: "wrapped up"},
		"Responses: consecutive items of one turn count once": {
			body: `{"input":[{"role":"user","content":[{"type":"input_text","text":` + task(script) + `}]},` +
				`{"type":"reasoning"},{"type":"function_call","call_id":"t1"},{"type":"function_call_output","call_id":"t1"}],` +
				respTools + `}`,
			say: "done"},
		"Responses, a string input: the tool by suffix": {
			body: `{"input":` + task(script) + `,` + respTools + `}`, tool: "agentrun__report_publish"},
		"Responses, a namespace tool (Codex's MCP servers): the function in it": {
			body: `{"input":` + task(script) + `,` + nsTools + `}`, tool: "report_publish", namespace: "mcp__agentrun"},
		"a script carrying a subagent's script: the outer one": {
			body: `{"messages":[{"role":"user","content":` + task(PromptScript(Script{Turns: []Turn{{Tools: []ToolCall{{ID: "t9",
				Name: "Agent", Arguments: map[string]any{"prompt": "Take notes. " + PromptScript(Script{Turns: []Turn{{Say: "inner"}}})}}}}}})) +
				`}],` + msgTools + `}`,
			tool: "Agent"},
		"the subagent's conversation: the inner one": {
			body: `{"messages":[{"role":"user","content":` + task(PromptScript(Script{Turns: []Turn{{Say: "inner"}}})) + `}],` +
				msgTools + `}`,
			say: "inner"},
		"a side request without tools is not scripted": {
			body: `{"messages":[{"role":"user","content":` + task(script) + `}]}`, noScript: true},
		"no script": {body: `{"messages":[{"role":"user","content":"hi"}],` + msgTools + `}`, noScript: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, _ := promptedTurn([]byte(c.body))
			switch {
			case c.noScript:
				if got != nil {
					t.Fatalf("got %+v, want no scripted turn", got)
				}
			case got == nil:
				t.Fatal("no scripted turn")
			case got.Say != c.say:
				t.Fatalf("say %q, want %q", got.Say, c.say)
			case c.tool != "" && (len(got.Tools) != 1 || got.Tools[0].Name != c.tool || got.Tools[0].Namespace != c.namespace):
				t.Fatalf("tools %+v, want %s in %q", got.Tools, c.tool, c.namespace)
			}
		})
	}
}
