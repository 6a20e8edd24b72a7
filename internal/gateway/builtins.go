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

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The gateway's built-in tools: report.publish writes a section of the
// run's report (the publication the operator settles from), notes.write
// appends to the run's notes (kept in the report ConfigMap under NotesKey,
// across attempts).

// NotesKey is the report ConfigMap's key of the run's notes (JSON lines).
const NotesKey = "notes.jsonl"

// maxNotesBytes bounds the notes of one run.
const maxNotesBytes = 256 << 10

// JSON schema and argument words of the built-ins.
const (
	jsonType    = "type"
	jsonObject  = "object"
	argSection  = "section"
	argContent  = "content"
	argText     = "text"
	strTrue     = "true"
	kindUnknown = "OutcomeUnknown"
	kindToolSrv = "ToolServerUnavailable"
)

type builtin struct {
	description string
	schema      map[string]any
}

func stringProps(required []string, props ...[2]string) map[string]any {
	p := map[string]any{}
	for _, x := range props {
		p[x[0]] = map[string]any{jsonType: "string", "description": x[1]}
	}
	return map[string]any{jsonType: jsonObject, "properties": p, wireRequired: required, "additionalProperties": false}
}

func builtinTool(name string) builtin {
	switch name {
	case gatewayapi.ToolReportPublish:
		return builtin{
			description: "Publish one section of the run's report (durable). With a plan, the section must be one of it.",
			schema: stringProps([]string{argSection, argContent},
				[2]string{argSection, "the section's title"}, [2]string{argContent, "the section's text (Markdown)"}),
		}
	case gatewayapi.ToolRunSpawn, gatewayapi.ToolRunChildren:
		return childTool(name)
	case gatewayapi.ToolNotesWrite:
		return builtin{
			description: "Record a finding in the run's working notes, tagged with the report section it belongs to.",
			schema: stringProps([]string{argText},
				[2]string{argSection, "report section the note is for"}, [2]string{argText, "the finding"}),
		}
	}
	return builtin{schema: map[string]any{jsonType: jsonObject}}
}

func textResult(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}

// runBuiltin performs a built-in tool's effect. Its outcome is always
// known: the API server answered or it did not (then nothing was written:
// a ConfigMap update is atomic).
func (k *keeper) runBuiltin(ctx context.Context, call *gatewayapi.ToolCall, args map[string]any) (*mcp.CallToolResult, callOutcome) {
	str := func(key string) string { s, _ := args[key].(string); return s }
	switch call.Tool {
	case gatewayapi.ToolReportPublish:
		rep, e := k.publish(ctx, str(argSection), str(argContent))
		if e != nil {
			return refusedResult(e, nil), callOutcome{fault: "PublishFailed", retryable: e.status >= 500, message: e.body.Message}
		}
		return textResult("published section %q (%d of %d sections in %s)",
			strings.TrimSpace(str(argSection)), rep.Committed, len(rep.Sections), rep.Location), callOutcome{}
	case gatewayapi.ToolNotesWrite:
		n, added, err := k.writeNote(ctx, str(argSection), strings.TrimSpace(str(argText)))
		switch {
		case err != nil:
			return toolError(gatewayapi.CodeNotPersisted, err.Error(), nil),
				callOutcome{fault: "NotesUnavailable", retryable: true, message: err.Error()}
		case !added:
			return textResult("already noted (%d notes)", n), callOutcome{}
		}
		return textResult("noted (%d notes)", n), callOutcome{}
	case gatewayapi.ToolRunSpawn, gatewayapi.ToolRunChildren:
		out, e := k.runChildTool(ctx, call.Tool, args)
		if e != nil {
			return refusedResult(e, nil), callOutcome{fault: "ChildRefused", retryable: e.status >= 500, message: e.body.Message}
		}
		raw, _ := json.Marshal(out)
		return textResult("%s", raw), callOutcome{}
	}
	return toolError(gatewayapi.CodeUnknownTool, "no built-in tool "+call.Tool, nil), callOutcome{}
}

type note struct {
	Section string `json:"section,omitempty"`
	Text    string `json:"text"`
	Attempt int32  `json:"attempt,omitempty"`
}

// writeNote appends a note (once: the same section and text is noted once).
func (k *keeper) writeNote(ctx context.Context, section, text string) (int, bool, error) {
	if text == "" {
		return 0, false, fmt.Errorf("notes.write needs a text")
	}
	ref := k.reportRef()
	count, added := 0, false
	_, err := k.g.writeReport(ctx, ref, func(plan []string, data map[string]string) ([]string, error) {
		lines := strings.Split(strings.TrimSuffix(data[NotesKey], "\n"), "\n")
		if data[NotesKey] == "" {
			lines = nil
		}
		count = len(lines)
		for _, l := range lines {
			var n note
			if json.Unmarshal([]byte(l), &n) == nil && strings.EqualFold(n.Section, section) && n.Text == text {
				added = false
				return plan, nil
			}
		}
		raw, _ := json.Marshal(note{Section: section, Text: text, Attempt: ref.attempt})
		if len(data[NotesKey])+len(raw) > maxNotesBytes {
			return nil, fmt.Errorf("the run's notes are full (%d notes, %d bytes)", count, len(data[NotesKey]))
		}
		data[NotesKey] += string(raw) + "\n"
		count++
		added = true
		return plan, nil
	})
	return count, added, err
}
