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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
)

// The Responses door: POST /v1/responses, the OpenAI Responses API (what
// Codex and the OpenAI Agents SDK speak by default). To a provider that
// speaks Responses the request passes through — its model rewritten, its
// max_output_tokens reserved and clamped like the chat door's max_tokens,
// every other field untouched (store and previous_response_id included) —
// and the answer, or its event stream, comes back unchanged. To a provider
// that speaks chat completions the gateway translates (translate_responses.go).
// Either way the request goes through the same flow as a chat completion
// (serveModelCall): the same grant, reservation, refusals, faults, metrics,
// span and run-stream events.

// fieldMaxOutputTokens is the Responses API's completion cap.
const fieldMaxOutputTokens = "max_output_tokens"

// responsesRequest is a parsed Responses request: its fields as sent and
// what the gateway reads of them.
type responsesRequest struct {
	body      []byte
	fields    map[string]json.RawMessage
	model     string
	stream    bool
	maxTokens int64 // max_output_tokens as requested, 0 if none
}

// responsesControlled are the fields of a Responses request the gateway
// reads or rewrites, passed through or translated: a folded twin of one is
// refused (refuseFoldedKeys).
var responsesControlled = []string{
	fieldModel, fieldStream, fieldMaxOutputTokens, wireInput, fieldInstructions, fieldTools, fieldToolChoice, argText, itemReasoning,
	fieldTemperature, fieldTopP, fieldParallelToolCalls, fieldStore, fieldPreviousResponseID, "conversation", fieldBackground, "include",
}

// parseResponses reads and checks a Responses request.
func parseResponses(r *http.Request) (*responsesRequest, *apiError) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxModelBody+1))
	switch {
	case err != nil:
		return nil, errInvalid("", "could not read the request body: "+err.Error())
	case len(body) > maxModelBody:
		return nil, errInvalid("", fmt.Sprintf("the request body exceeds %d bytes", maxModelBody))
	}
	c := &responsesRequest{body: body}
	if err := json.Unmarshal(body, &c.fields); err != nil || c.fields == nil {
		return nil, errInvalid("", "the body must be a JSON object (a Responses API request)")
	}
	if e := refuseFoldedKeys(c.fields, responsesControlled, ""); e != nil {
		return nil, e
	}
	if err := json.Unmarshal(c.fields[fieldModel], &c.model); err != nil || c.model == "" {
		return nil, errInvalid(fieldModel, "model is required: a string naming one of the models the run's policy serves")
	}
	if raw, ok := c.fields[fieldStream]; ok && string(raw) != jsonNull && json.Unmarshal(raw, &c.stream) != nil {
		return nil, errInvalid(fieldStream, "stream must be a boolean")
	}
	if raw, ok := c.fields[fieldMaxOutputTokens]; ok && string(raw) != jsonNull {
		if json.Unmarshal(raw, &c.maxTokens) != nil || c.maxTokens < 1 {
			return nil, errInvalid(fieldMaxOutputTokens, fieldMaxOutputTokens+" must be a positive integer")
		}
	}
	return c, nil
}

// conversation is the request's instructions and input as chat messages
// (role and content) for the conversation's fingerprint.
func (c *responsesRequest) conversation() []json.RawMessage {
	var msgs []json.RawMessage
	var s string
	if json.Unmarshal(c.fields[fieldInstructions], &s) == nil && s != "" {
		m, _ := json.Marshal(map[string]string{keyRole: roleSystem, argContent: s})
		msgs = append(msgs, m)
	}
	if json.Unmarshal(c.fields[wireInput], &s) == nil {
		m, _ := json.Marshal(map[string]string{keyRole: roleUser, argContent: s})
		return append(msgs, m)
	}
	var items []json.RawMessage
	_ = json.Unmarshal(c.fields[wireInput], &items)
	return append(msgs, items...)
}

// responses serves POST /v1/responses.
func (g *Gateway) responses(w http.ResponseWriter, r *http.Request, k *keeper) {
	g.serveModelCall(w, r, k, func(r *http.Request) (*modelCall, *apiError) {
		c, e := parseResponses(r)
		if e != nil {
			return nil, e
		}
		call := &modelCall{model: c.model, stream: c.stream, maxTokens: c.maxTokens, choices: 1,
			conv: conversationFingerprint(c.conversation()), shape: shapeOf(c.model, len(c.body), c.fields, wireInput)}
		var tr *responsesTranslation
		call.prepare = func(m v1alpha1.Model) (int64, *apiError) {
			switch m.API {
			case v1alpha1.ModelAPIOpenAIResponses:
				return int64(len(c.body)), nil
			case "", v1alpha1.ModelAPIOpenAIChat:
				var e *apiError
				tr, e = translateResponses(c)
				if e != nil {
					return 0, e
				}
				// The provider reads the translated request: the bound is
				// the larger of the two.
				return int64(max(len(c.body), tr.size())), nil
			case v1alpha1.ModelAPIAnthropicMessages:
				var e *apiError
				if tr, e = translateResponses(c); e != nil {
					return 0, e
				}
				return tr.boundAsMessages(m, len(c.body))
			default:
				return 0, errInvalid(fieldModel, fmt.Sprintf("model %q is served by a provider that speaks %s, and this gateway "+
					"does not translate the Responses API to it: use the %s door, or a model whose provider speaks OpenAIResponses "+
					"or OpenAIChat", m.Name, m.API, m.API))
			}
		}
		call.dispatch = func(ctx context.Context, x *exchange, mt int64, key string) {
			if tr != nil {
				x.forwardResponsesToChat(ctx, tr, mt, key)
				return
			}
			x.forwardResponses(ctx, c.upstreamBody(x.m, mt), key, c.stream)
		}
		return call, nil
	})
}

// upstreamBody is the request as a Responses provider gets it: its model id
// and the max_output_tokens the gateway reserved; every other field as sent.
func (c *responsesRequest) upstreamBody(m v1alpha1.Model, maxTokens int64) []byte {
	id := m.UpstreamModel
	if id == "" {
		id = m.Name
	}
	c.fields[fieldModel], _ = json.Marshal(id)
	if maxTokens > 0 {
		c.fields[fieldMaxOutputTokens], _ = json.Marshal(maxTokens)
	}
	out, _ := json.Marshal(c.fields)
	return out
}

// responsesUsage is the usage a Responses answer reports.
type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// charged is what the usage charges (wireUsage.charged): cached tokens are
// part of input_tokens, reasoning tokens part of output_tokens, so neither
// is added again.
func (u *responsesUsage) charged() (tokenUse, bool) {
	if u == nil {
		return tokenUse{}, false
	}
	w := &wireUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
	w.PromptTokensDetails.CachedTokens = u.InputTokensDetails.CachedTokens
	return w.charged()
}

// attrReasoningTokens is the reasoning part of the output tokens (no
// semantic convention names it yet).
const attrReasoningTokens = attribute.Key("agentrun.usage.reasoning_tokens")

// spanResponsesUsage records a Responses usage on the span of ctx.
func spanResponsesUsage(ctx context.Context, u *responsesUsage) {
	if u == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(semconv.GenAIUsageInputTokens(int(u.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(u.OutputTokens)),
		semconv.GenAIUsageCacheReadInputTokens(int(u.InputTokensDetails.CachedTokens)),
		attrReasoningTokens.Int64(u.OutputTokensDetails.ReasoningTokens))
}

// forwardResponses sends a request to a Responses provider and relays its
// answer unchanged, counting the usage it reports.
func (x *exchange) forwardResponses(rctx context.Context, out []byte, key string, streamed bool) {
	g := x.g
	resp, cancel := x.send(rctx, "/responses", out, key, streamed)
	if resp == nil {
		return
	}
	defer cancel()
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode != http.StatusOK:
		x.upstreamError(resp, key)
	case !streamed:
		raw, answered, rerr := x.readAnswer(resp)
		if answered {
			return
		}
		var a struct {
			Usage *responsesUsage `json:"usage"`
		}
		var tokens tokenUse
		reported := false
		if rerr == nil && json.Unmarshal(raw, &a) == nil {
			tokens, reported = a.Usage.charged()
			spanResponsesUsage(rctx, a.Usage)
		}
		copyHeader(x.w, resp, "Content-Type")
		x.w.WriteHeader(http.StatusOK)
		_, _ = x.w.Write(raw)
		x.stream(func(tr *openai.Translator) []stream.Event {
			return append(tr.Completion(responseAsCompletion(raw)), tr.End(rerr)...)
		})
		x.k.noteAnswer(chatCompletionDigest(responseAsCompletion(raw)))
		x.count("ok", tokens, reported)
	default:
		var cut error
		digest := newAnswerDigest()
		tokens, reported := g.relayResponses(x.w, resp, x.k, x.m.Name, func(u *responsesUsage) { spanResponsesUsage(rctx, u) },
			func(payload []byte) {
				if chunk := responseEventAsChunk(payload); chunk != nil {
					digest.chatChunk(chunk)
					x.stream(func(tr *openai.Translator) []stream.Event { return tr.Chunk(chunk) })
				}
			}, &cut)
		x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(cut) })
		x.k.noteAnswer(digest.sum())
		x.done = g.clock.Now()
		outcome := "ok"
		if !reported {
			outcome = outcomeStreamCut
		}
		x.count(outcome, tokens, reported)
	}
}

// readAnswer reads a non-streamed answer within the gateway's bound; an
// answer beyond it is answered as too large (answered). A read error is a
// Provider fault (ResponseCut), returned with what was read.
func (x *exchange) readAnswer(resp *http.Response) (raw []byte, answered bool, rerr error) {
	raw, rerr = io.ReadAll(io.LimitReader(resp.Body, x.g.opts.MaxModelResponseBytes+1))
	x.done = x.g.clock.Now()
	if int64(len(raw)) > x.g.opts.MaxModelResponseBytes {
		x.tooLarge(fmt.Sprintf("its answer exceeds the gateway's bound of %d bytes (--max-model-response-bytes)",
			x.g.opts.MaxModelResponseBytes))
		return nil, true, nil
	}
	if rerr != nil {
		x.k.providerFault("ResponseCut", true, fmt.Sprintf("model %s: %v", x.m.Name, rerr))
	}
	return raw, false, rerr
}

// responsesEnd are the events that end a Responses stream; the first three
// carry the response, with its usage.
var responsesEnd = map[string]bool{evCompleted: true, evIncomplete: true, "response.failed": true, keyError: true}

// relayResponses copies a Responses event stream to the client unchanged, as
// it comes, reading the usage of the response its last event carries. A
// stream that ends before its last event (response.completed, incomplete or
// failed, or error) is a Provider fault (StreamCut), and the client gets an
// error event saying so, as the Responses API ends a failed stream. A client
// that leaves does not stop the reading.
func (g *Gateway) relayResponses(w http.ResponseWriter, resp *http.Response, k *keeper, model string,
	onUsage func(*responsesUsage), onData func([]byte), cut *error) (tokenUse, bool) {
	fl, _ := w.(http.Flusher)
	copyHeader(w, resp, "Content-Type")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	clientGone, open := false, false
	write := func(b []byte) {
		blank := len(bytes.TrimRight(b, "\r\n")) == 0
		open = !blank
		if clientGone {
			return
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return
		}
		if fl != nil && blank {
			fl.Flush()
		}
	}
	var tokens tokenUse
	reported, done := false, false
	seq := int64(-1)
	br := streamReader(resp.Body)
	defer releaseStreamReader(br)
	for {
		line, err := readLine(br, g.opts.MaxModelResponseBytes)
		if errors.Is(err, errLineTooLong) {
			g.metrics.tooLarge.WithLabelValues("model_stream_line").Inc()
			err = fmt.Errorf("%w (one line of the stream exceeds the gateway's bound of %d bytes, --max-model-response-bytes)",
				err, g.opts.MaxModelResponseBytes)
			line = nil
		}
		if len(line) > 0 {
			if payload, isData := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); isData {
				payload = bytes.TrimSpace(payload)
				var ev struct {
					Type     string `json:"type"`
					Sequence *int64 `json:"sequence_number"`
					Response *struct {
						Usage *responsesUsage `json:"usage"`
					} `json:"response"`
				}
				if json.Unmarshal(payload, &ev) == nil {
					if ev.Sequence != nil {
						seq = *ev.Sequence
					}
					if responsesEnd[ev.Type] {
						done = true
						if ev.Response != nil && ev.Response.Usage != nil {
							tokens, reported = ev.Response.Usage.charged()
							onUsage(ev.Response.Usage)
						}
					}
				}
				onData(payload)
			}
			write(line)
		}
		if err != nil {
			if !done {
				k.providerFault("StreamCut", true, fmt.Sprintf("model %s: the stream ended before response.completed: %v", model, err))
				*cut = fmt.Errorf("the provider's stream ended before response.completed: %w", err)
				if open {
					write([]byte("\n"))
				}
				write(responsesErrorEvent(seq+1, outcomeStreamCut, fmt.Sprintf(
					"the provider of model %q ended the stream before the response completed (%v); the request is counted, "+
						"with its token reservation charged", model, err)))
			}
			if fl != nil && !clientGone {
				fl.Flush()
			}
			return tokens, reported
		}
	}
}

// responsesErrorEvent is the Responses API's error event.
func responsesErrorEvent(seq int64, code, msg string) []byte {
	data, _ := json.Marshal(map[string]any{jsonType: keyError, labelCode: code, itemMessage: msg, "param": nil, "sequence_number": seq})
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", data)
}
