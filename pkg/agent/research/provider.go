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

package research

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// Purpose says what a model request is for.
type Purpose string

const (
	// PurposePlan asks for the report's sections.
	PurposePlan Purpose = "plan"
	// PurposeStep is one turn of the research loop.
	PurposeStep Purpose = "step"
	// PurposeFinalize asks to publish what is left, from the reserve.
	PurposeFinalize Purpose = "finalize"
)

// Message roles.
const (
	roleSystem    = "system"
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// maxSections bounds a plan (the gateway refuses more).
const maxSections = 20

// Provider error kinds used in more than one place.
const (
	kindInvalidRequest = "InvalidRequest"
	kindUnavailable    = "Unavailable"
	kindBadResponse    = "BadResponse"
)

// Message is one message of the conversation, in the chat-completions shape.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Content is the text.
	Content string `json:"content,omitempty"`
	// ToolCalls are the assistant's tool calls.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolCallID answers a tool call (role tool).
	ToolCallID string `json:"toolCallID,omitempty"`
}

// ToolCall is a tool call the model asked for.
type ToolCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args map[string]any `json:"args,omitempty"`
}

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  map[string]any
}

// Request is one model request.
type Request struct {
	Purpose  Purpose
	Model    string
	Messages []Message
	Tools    []ToolSpec
	// Sections are the planned sections not yet published (finalize).
	Sections []string
}

// Response is the model's answer.
type Response struct {
	// Content is the text (for a plan: the sections, a JSON array or a list).
	Content string
	// ToolCalls the model asked for.
	ToolCalls []ToolCall
	// Finish says the model considers the work done.
	Finish bool
	// Tokens used by the request.
	Tokens int64
	// Advice that came with the answer (a reviewer's or stop hook's); it is
	// recorded and never obeyed.
	Advice []AdviceItem
}

// AdviceItem is a piece of advice (source reviewer, kind Continue, ...).
type AdviceItem struct {
	Source string `json:"source"`
	Kind   string `json:"kind"`
}

// Provider answers model requests. A provider's error should be a
// *ProviderError (wrapped by Fault) so the loop knows whether to retry.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// ProviderError is a model provider's failure.
type ProviderError struct {
	// Kind is a short PascalCase cause: RateLimited, ServerError,
	// Unavailable, Timeout, BadResponse, InvalidRequest, Unauthorized, ...
	Kind string
	// Retryable says whether the same request may succeed later.
	Retryable bool
	// Status is the HTTP status, if any.
	Status int
	// Message is the provider's message.
	Message string
	// RetryAfter is the provider's requested pause, if it gave one.
	RetryAfter time.Duration
}

func (e *ProviderError) Error() string {
	s := "model provider: " + e.Kind
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Fault returns e as the SDK's FaultError, so the SDK records a Provider
// fault of e.Kind with e.Retryable.
func (e *ProviderError) Fault() error {
	return &agent.FaultError{Kind: e.Kind, Retryable: e.Retryable, Err: e}
}

// parsePlan reads section titles from a model's plan: a JSON array of
// strings, or one title per line (bullets and numbering removed).
func parsePlan(content string) []string {
	content = strings.TrimSpace(content)
	content = strings.TrimPrefix(strings.TrimSuffix(content, "```"), "```json")
	content = strings.TrimSpace(strings.TrimPrefix(content, "```"))
	var list []string
	if err := json.Unmarshal([]byte(content), &list); err != nil {
		list = nil
		for line := range strings.SplitSeq(content, "\n") {
			line = strings.TrimSpace(line)
			line = strings.TrimLeft(line, "-*•#0123456789.) ")
			if line != "" {
				list = append(list, line)
			}
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" || seen[strings.ToLower(s)] {
			continue
		}
		seen[strings.ToLower(s)] = true
		out = append(out, textutil.Truncate(s, 120))
		if len(out) == maxSections {
			break
		}
	}
	return out
}
