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
	"fmt"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The operator's directives act at the doors, not only in agents that obey
// them (issue 30, item 3). The policy declares what each does:
//
//   - Degrade: the model door serves the model's degradedModel (serveModel);
//     the tool door leaves the tools marked degradable out of tools/list and
//     refuses their calls, as the agent API does (tool_degraded);
//   - Compress: with spec.compression, a model request may generate at most
//     compression.maxTokens, and a tool result relayed by the tool door is
//     trimmed to compression.maxToolResultBytes.
//
// These are pure functions of the attempt's spec.

// directiveOf is the attempt's directive of type t, or nil.
func directiveOf(spec v1alpha1.RunAttemptSpec, t v1alpha1.DirectiveType) *v1alpha1.Directive {
	for i := range spec.Directives {
		if spec.Directives[i].Type == t {
			return &spec.Directives[i]
		}
	}
	return nil
}

// withheld says whether the tool door withholds tool: a degradable tool
// (never the output tool) while the attempt carries a Degrade directive.
func withheld(spec v1alpha1.RunAttemptSpec, tool v1alpha1.Tool) bool {
	return tool.Degradable && tool.Name != gatewayapi.ToolReportPublish && directiveOf(spec, v1alpha1.DirectiveDegrade) != nil
}

// degradedRefusal refuses a call of a tool withheld under Degrade, naming
// the directive and the gate that set it; nil if the tool is served.
func degradedRefusal(spec v1alpha1.RunAttemptSpec, tool v1alpha1.Tool) *apiError {
	if !withheld(spec, tool) {
		return nil
	}
	d := directiveOf(spec, v1alpha1.DirectiveDegrade)
	return denied(gatewayapi.CodeToolDegraded, "ToolDegraded", fmt.Sprintf(
		"the run is degraded (directive Degrade, gate %s: %s) and RuntimePolicy %q marks %q degradable: "+
			"it is not served while the directive stands", d.Gate, d.Message, spec.Policy.Name, tool.Name))
}

// compressedMaxTokens is the cap on one model request's generated tokens
// under Compress: capTokens, lowered to compression.maxTokens.
func compressedMaxTokens(spec v1alpha1.RunAttemptSpec, capTokens *int64) *int64 {
	c := spec.Policy.Compression
	if c == nil || c.MaxTokens == nil || directiveOf(spec, v1alpha1.DirectiveCompress) == nil {
		return capTokens
	}
	if capTokens == nil || *c.MaxTokens < *capTokens {
		return c.MaxTokens
	}
	return capTokens
}

// compressedResultBytes is the most text bytes the tool door relays of one
// result under Compress; 0: no bound.
func compressedResultBytes(spec v1alpha1.RunAttemptSpec) int64 {
	c := spec.Policy.Compression
	if c == nil || c.MaxToolResultBytes == nil || directiveOf(spec, v1alpha1.DirectiveCompress) == nil {
		return 0
	}
	return *c.MaxToolResultBytes
}

// trimResult cuts res's text to limit bytes (on a character boundary), and
// says where and why; structured content, a copy of the text, goes. It
// reports whether it cut anything.
func trimResult(res *mcp.CallToolResult, limit int64) bool {
	var total int64
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			total += int64(len(t.Text))
		}
	}
	if limit <= 0 || total <= limit {
		return false
	}
	left := limit
	out := make([]mcp.Content, 0, len(res.Content)+1)
	for _, c := range res.Content {
		t, ok := c.(*mcp.TextContent)
		if !ok {
			out = append(out, c)
			continue
		}
		if left <= 0 {
			continue
		}
		s := t.Text
		if int64(len(s)) > left {
			n := int(left)
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			s = s[:n]
		}
		left -= int64(len(s))
		out = append(out, &mcp.TextContent{Text: s})
	}
	out = append(out, &mcp.TextContent{Text: fmt.Sprintf(
		"[agentrun: result trimmed to %d of %d bytes under the run's Compress directive]", limit, total)})
	res.Content, res.StructuredContent = out, nil
	return true
}
