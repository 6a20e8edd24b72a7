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
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAI is the provider for real models: one chat completion through the
// gateway's model door (the official openai-go client the SDK returns). The
// gateway forwards it to the provider the policy names, with the provider's
// key; the agent never holds one. Retries are the research loop's, so each
// is a model request counted against the grant.
type OpenAI struct {
	// Client is the SDK's OpenAI client (agent.Agent.OpenAI).
	Client openai.Client
}

// Complete sends req as one chat completion.
func (p *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	return p.CompleteWith(ctx, req)
}

// CompleteWith sends req as one chat completion with opts added to the
// HTTP request (a header, an extra field in the body).
func (p *OpenAI) CompleteWith(ctx context.Context, req Request, opts ...option.RequestOption) (Response, error) {
	return chatCompletion(ctx, p.Client, req, opts)
}

// WireName is a tool's name as a function name of the chat-completions
// wire format (gatewayapi.FunctionName): "report.publish" → "report_publish".
func WireName(name string) string { return gatewayapi.FunctionName(name) }

// chatCompletion sends req with c and opts.
func chatCompletion(ctx context.Context, c openai.Client, req Request, opts []option.RequestOption) (Response, error) {
	names := map[string]string{} // wire name → tool name
	params := openai.ChatCompletionNewParams{Model: req.Model}
	for _, t := range req.Tools {
		w := WireName(t.Name)
		names[w] = t.Name
		ps := t.Parameters
		if ps == nil {
			ps = map[string]any{schemaType: jsonObject}
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: w, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(ps),
		}))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case roleSystem:
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case roleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case roleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		default:
			am := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				args, err := json.Marshal(tc.Args)
				if err != nil {
					return Response{}, (&ProviderError{Kind: kindInvalidRequest, Message: err.Error()}).Fault()
				}
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: WireName(tc.Name), Arguments: string(args)},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		}
	}
	purpose := gatewayapi.PurposeResearch
	if req.Purpose == PurposeFinalize {
		purpose = gatewayapi.PurposeOutput
	}
	opts = append(slices.Clip(opts), option.WithHeader(gatewayapi.HeaderPurpose, purpose))
	out, err := c.Chat.Completions.New(ctx, params, opts...)
	if err != nil {
		return Response{}, classify(ctx, err)
	}
	if len(out.Choices) == 0 {
		return Response{}, (&ProviderError{Kind: kindBadResponse, Retryable: true,
			Message: "response has no choices"}).Fault()
	}
	choice := out.Choices[0]
	resp := Response{Content: choice.Message.Content, Tokens: out.Usage.TotalTokens}
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

// classify leaves the errors the SDK maps (the gateway's and provider's
// answers, an unreachable gateway, the context's end) as they are, and
// makes an answer that could not be read (a proxy's HTML page where JSON
// was due) a retryable BadResponse rather than a fatal error.
func classify(ctx context.Context, err error) error {
	var oe *openai.Error
	var ne net.Error
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || ctx.Err() != nil {
		return err
	}
	return (&ProviderError{Kind: kindBadResponse, Retryable: true, Message: err.Error()}).Fault()
}

// retryAfter is the pause a provider asked for (Retry-After), if any.
func retryAfter(err error) time.Duration {
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.Response == nil {
		return 0
	}
	ra := oe.Response.Header.Get("Retry-After")
	if secs, err := strconv.Atoi(ra); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(ra); err == nil {
		return time.Until(t)
	}
	return 0
}
