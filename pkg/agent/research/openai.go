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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxResponseBytes bounds a provider response read into memory.
const maxResponseBytes = 8 << 20

// OpenAI is a provider for OpenAI-compatible chat-completions APIs with tool
// calls (OpenAI, and the many servers that speak the same wire format). One
// Complete is one HTTP request; retries are the research loop's, so each is
// a model request counted against the grant.
type OpenAI struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1; requests go
	// to BaseURL + "/chat/completions".
	BaseURL string
	// APIKey is sent as a bearer token (a pod gets it from a Secret through
	// env OPENAI_API_KEY).
	APIKey string
	// HTTPClient sends the requests (default: a client with a 2 minute timeout).
	HTTPClient *http.Client
}

type oaRequest struct {
	Model      string      `json:"model"`
	Messages   []oaMessage `json:"messages"`
	Tools      []oaTool    `json:"tools,omitempty"`
	ToolChoice string      `json:"tool_choice,omitempty"`
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string     `json:"type"`
	Function oaFunction `json:"function"`
}

type oaFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
}

type oaResponse struct {
	Choices []struct {
		Message      oaMessage `json:"message"`
		FinishReason string    `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

type oaError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// wireName maps a tool name to what function names may contain
// (^[a-zA-Z0-9_-]{1,64}$): "report.publish" → "report_publish".
func wireName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return truncateString(b.String(), 64)
}

// Complete sends req as one chat-completions request.
func (p *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	names := map[string]string{} // wire name → tool name
	body := oaRequest{Model: req.Model}
	for _, t := range req.Tools {
		w := wireName(t.Name)
		names[w] = t.Name
		params := t.Parameters
		if params == nil {
			params = map[string]any{schemaType: jsonObject}
		}
		fn := oaFunction{Name: w, Description: t.Description, Parameters: params}
		body.Tools = append(body.Tools, oaTool{Type: "function", Function: fn})
	}
	if len(body.Tools) > 0 {
		body.ToolChoice = "auto"
	}
	for _, m := range req.Messages {
		om := oaMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			content := m.Content
			om.Content = &content
		}
		for _, tc := range m.ToolCalls {
			args, err := json.Marshal(tc.Args)
			if err != nil {
				return Response{}, (&ProviderError{Kind: kindInvalidRequest, Message: err.Error()}).Fault()
			}
			otc := oaToolCall{ID: tc.ID, Type: "function"}
			otc.Function.Name = wireName(tc.Name)
			otc.Function.Arguments = string(args)
			om.ToolCalls = append(om.ToolCalls, otc)
		}
		body.Messages = append(body.Messages, om)
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return Response{}, (&ProviderError{Kind: kindInvalidRequest, Message: err.Error()}).Fault()
	}

	endpoint := strings.TrimSuffix(p.BaseURL, "/") + "/chat/completions"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(payload))
	if err != nil {
		return Response{}, (&ProviderError{Kind: kindInvalidRequest, Message: err.Error()}).Fault()
	}
	hreq.Header.Set("Content-Type", "application/json")
	if p.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.APIKey)
	}
	hc := p.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 2 * time.Minute}
	}
	hresp, err := hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return Response{}, context.Cause(ctx)
		}
		kind := kindUnavailable
		if errors.Is(err, context.DeadlineExceeded) {
			kind = "Timeout"
		}
		return Response{}, (&ProviderError{Kind: kind, Retryable: true, Message: err.Error()}).Fault()
	}
	defer func() { _ = hresp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes))
	if err != nil {
		return Response{}, (&ProviderError{Kind: kindUnavailable, Retryable: true, Status: hresp.StatusCode,
			Message: err.Error()}).Fault()
	}
	if hresp.StatusCode/100 != 2 {
		return Response{}, statusError(hresp, raw).Fault()
	}

	var out oaResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return Response{}, (&ProviderError{Kind: kindBadResponse, Retryable: true, Status: hresp.StatusCode,
			Message: "response is not chat-completions JSON: " + err.Error()}).Fault()
	}
	if len(out.Choices) == 0 {
		return Response{}, (&ProviderError{Kind: kindBadResponse, Retryable: true, Status: hresp.StatusCode,
			Message: "response has no choices"}).Fault()
	}
	choice := out.Choices[0]
	resp := Response{Tokens: out.Usage.TotalTokens}
	if resp.Tokens == 0 {
		resp.Tokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	}
	if choice.Message.Content != nil {
		resp.Content = *choice.Message.Content
	}
	for _, tc := range choice.Message.ToolCalls {
		name := tc.Function.Name
		if n, ok := names[name]; ok {
			name = n
		}
		call := ToolCall{ID: tc.ID, Name: name}
		if strings.TrimSpace(tc.Function.Arguments) != "" {
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &call.Args); err != nil {
				// Let the tool refuse it: the model sees the error and can fix it.
				call.Args = map[string]any{"_invalid_json": tc.Function.Arguments}
			}
		}
		resp.ToolCalls = append(resp.ToolCalls, call)
	}
	resp.Finish = req.Purpose == PurposeStep && len(resp.ToolCalls) == 0
	return resp, nil
}

// statusError classifies a non-2xx answer.
func statusError(hresp *http.Response, raw []byte) *ProviderError {
	e := &ProviderError{Status: hresp.StatusCode}
	var body oaError
	if json.Unmarshal(raw, &body) == nil && body.Error.Message != "" {
		e.Message = body.Error.Message
	} else {
		e.Message = truncateString(strings.TrimSpace(string(raw)), 256)
	}
	switch code := hresp.StatusCode; {
	case code == http.StatusTooManyRequests:
		e.Kind, e.Retryable = "RateLimited", true
	case code == http.StatusRequestTimeout:
		e.Kind, e.Retryable = "Timeout", true
	case code == http.StatusServiceUnavailable, code == http.StatusBadGateway, code == http.StatusGatewayTimeout:
		e.Kind, e.Retryable = kindUnavailable, true
	case code >= 500:
		e.Kind, e.Retryable = "ServerError", true
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		e.Kind = "Unauthorized"
	case code == http.StatusNotFound:
		e.Kind = "NotFound"
	case code == http.StatusRequestEntityTooLarge:
		e.Kind = "ContextTooLong"
	default:
		e.Kind = kindInvalidRequest
	}
	if ra := hresp.Header.Get("Retry-After"); ra != "" && e.Retryable {
		if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}
