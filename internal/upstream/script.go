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
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"time"
)

// Prompted scripts. An unmodified agent (Claude Code, Codex) cannot add a
// field to its requests, but it sends its task in every request. A task that
// carries a script between ScriptOpen and ScriptClose is answered from it:
// the request's turn is the script's turn whose index is the number of
// assistant turns already in the conversation, whatever the door (chat
// messages, Messages, Responses input items). After the last turn, and for
// a request without tools (a harness's side request: a title, a summary),
// the default answer. Once a message carrying FinalizeMarker is in the
// conversation (the harness launcher's wrap-up prompt), the turns are the
// script's finalize turns, counted from that message.
//
// A scripted tool name is matched to the request's tools: the tool whose
// name, with every character outside [A-Za-z0-9] read as "_", is the
// scripted name so read, or ends with "_" and it (report.publish is
// mcp__agentrun__report_publish to Claude Code).
const (
	ScriptOpen     = "<agentrun-script>"
	ScriptClose    = "</agentrun-script>"
	FinalizeMarker = "[agentrun:finalize]"
)

// Script is a prompted script.
type Script struct {
	Turns    []Turn `json:"turns"`
	Finalize []Turn `json:"finalize,omitempty"`
}

// PromptScript renders s for a task: the text to append to it.
func PromptScript(s Script) string {
	raw, _ := json.Marshal(s)
	return ScriptOpen + string(raw) + ScriptClose
}

// Responses item types.
const (
	itemFunctionCall = "function_call"
	itemReasoning    = "reasoning"
)

// scriptPattern is greedy: a script may carry another in a turn's
// arguments (a subagent's prompt), and the outer one ends last.
var scriptPattern = regexp.MustCompile(regexp.QuoteMeta(ScriptOpen) + `(.*)` + regexp.QuoteMeta(ScriptClose))

// entry is one message of a conversation, as the script counts it.
type entry struct {
	assistant bool
	text      string
}

// prompted is promptedTurn, noting when each script's first request
// arrived (FirstPrompted).
func (s *Server) prompted(body []byte) *Turn {
	t, key := promptedTurn(body)
	if key != "" {
		now := time.Now()
		s.mu.Lock()
		if s.firstPrompted == nil {
			s.firstPrompted = map[string]time.Time{}
		}
		if _, ok := s.firstPrompted[key]; !ok {
			s.firstPrompted[key] = now
		}
		s.mu.Unlock()
	}
	return t
}

// FirstPrompted is when the first request carrying script arrived (the
// zero time: none did): an agent's first model request, for measuring its
// start-up.
func (s *Server) FirstPrompted(script Script) time.Time {
	raw, _ := json.Marshal(script)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstPrompted[string(raw)]
}

// promptedTurn is the turn a prompted script gives a request's body (nil:
// none does), and the script's JSON ("": no script).
func promptedTurn(body []byte) (*Turn, string) {
	// The markers' name, as JSON may escape the brackets (\u003c).
	if !bytes.Contains(body, []byte("agentrun-script")) {
		return nil, ""
	}
	var req struct {
		Tools    []json.RawMessage `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
		System   json.RawMessage   `json:"system"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Tools) == 0 {
		return nil, ""
	}
	conv := conversation(req.Messages, req.Input)
	var script *Script
	var key string
	for _, e := range conv {
		if m := scriptPattern.FindStringSubmatch(e.text); m != nil && !e.assistant {
			var s Script
			if json.Unmarshal([]byte(m[1]), &s) == nil {
				script, key = &s, m[1]
				break
			}
		}
	}
	if script == nil {
		return nil, ""
	}
	turns, from := script.Turns, 0
	for i, e := range conv {
		if !e.assistant && strings.Contains(e.text, FinalizeMarker) {
			turns, from = script.Finalize, i
		}
	}
	n := 0
	for i, e := range conv[from:] {
		if e.assistant && (i == 0 || !conv[from+i-1].assistant) {
			n++
		}
	}
	if n >= len(turns) {
		return nil, key
	}
	t := turns[n]
	names := toolNames(req.Tools)
	t.Tools = append([]ToolCall(nil), t.Tools...)
	for i := range t.Tools {
		t.Tools[i].Namespace, t.Tools[i].Name = matchTool(t.Tools[i].Name, names)
	}
	return &t, key
}

// conversation reads chat or Messages messages, or Responses input items.
func conversation(messages []json.RawMessage, input json.RawMessage) []entry {
	items := messages
	if len(items) == 0 {
		var s string
		if json.Unmarshal(input, &s) == nil {
			return []entry{{text: s}}
		}
		_ = json.Unmarshal(input, &items)
	}
	out := make([]entry, 0, len(items))
	for _, raw := range items {
		var it struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		switch {
		case it.Role == roleAssistant, it.Type == itemFunctionCall, it.Type == itemReasoning:
			out = append(out, entry{assistant: true})
		case it.Role == "user", it.Role == "tool", it.Type == "function_call_output":
			out = append(out, entry{text: contentText(it.Content)})
		}
	}
	return out
}

// contentText is a message's text: a string, or its parts' texts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// toolName is a request's tool: its name, and the namespace (a Responses
// namespace tool, as Codex groups an MCP server's tools) it is in.
type toolName struct{ namespace, name string }

// toolNames are the names of a request's tools (chat's function.name,
// Messages' and Responses' name, and a Responses namespace's tools).
func toolNames(tools []json.RawMessage) []toolName {
	out := make([]toolName, 0, len(tools))
	for _, raw := range tools {
		var t struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		if t.Type == "namespace" {
			for _, in := range t.Tools {
				out = append(out, toolName{namespace: t.Name, name: in.Name})
			}
			continue
		}
		out = append(out, toolName{name: t.Name + t.Function.Name})
	}
	return out
}

var notWord = regexp.MustCompile(`[^A-Za-z0-9]`)

// matchTool is the request's tool a scripted name stands for (its
// namespace and name), or the name.
func matchTool(name string, tools []toolName) (string, string) {
	want := notWord.ReplaceAllString(name, "_")
	for _, t := range tools {
		got := notWord.ReplaceAllString(t.namespace+"_"+t.name, "_")
		if t.namespace == "" {
			got = notWord.ReplaceAllString(t.name, "_")
		}
		if got == want || strings.HasSuffix(got, "_"+want) {
			return t.namespace, t.name
		}
	}
	return "", name
}
