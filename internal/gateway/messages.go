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
	"strings"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The Anthropic Messages door: POST /v1/messages (and its count_tokens),
// the API Claude Code and the Anthropic SDKs speak. A model whose provider
// speaks Messages gets the request as sent — blocks of every type, tools,
// thinking, unknown fields — with the model id and max_tokens the gateway
// sets, and the provider key in x-api-key. The accounting is the chat
// door's: the same admission (the body's bytes plus max_tokens reserved),
// settlement on the reported usage, refusals and faults; only the shapes
// differ, and every refusal answers in the Anthropic error shape.

// anthropicVersion is sent upstream when the client names none.
const anthropicVersion = "2023-06-01"

// messagesControlled are the fields of a Messages request the gateway reads
// or rewrites.
var messagesControlled = []string{fieldModel, jMessages, jStream, fieldMaxTokens}

// messagesRequest is a parsed Messages request.
type messagesRequest struct {
	body      []byte
	fields    map[string]json.RawMessage
	model     string
	stream    bool
	maxTokens int64 // as requested, 0 if none
}

// parseMessages reads and checks a Messages request.
func parseMessages(r *http.Request) (*messagesRequest, *apiError) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxModelBody+1))
	switch {
	case err != nil:
		return nil, errInvalid("", "could not read the request body: "+err.Error())
	case len(body) > maxModelBody:
		return nil, errInvalid("", fmt.Sprintf("the request body exceeds %d bytes", maxModelBody))
	}
	c := &messagesRequest{body: body}
	if err := json.Unmarshal(body, &c.fields); err != nil || c.fields == nil {
		return nil, errInvalid("", "the body must be a JSON object (a Messages request)")
	}
	if e := refuseFoldedKeys(c.fields, messagesControlled, ""); e != nil {
		return nil, e
	}
	if err := json.Unmarshal(c.fields[fieldModel], &c.model); err != nil || c.model == "" {
		return nil, errInvalid(fieldModel, "model is required: a string naming one of the models the run's policy serves")
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(c.fields[jMessages], &msgs); err != nil || len(msgs) == 0 {
		return nil, errInvalid(jMessages, "messages is required: a non-empty array")
	}
	if raw, ok := c.fields[jStream]; ok && string(raw) != jsonNull && json.Unmarshal(raw, &c.stream) != nil {
		return nil, errInvalid(jStream, "stream must be a boolean")
	}
	if raw, ok := c.fields[fieldMaxTokens]; ok && string(raw) != jsonNull {
		if json.Unmarshal(raw, &c.maxTokens) != nil || c.maxTokens < 1 {
			return nil, errInvalid(fieldMaxTokens, "max_tokens must be a positive integer")
		}
	}
	return c, nil
}

// upstreamBody is the request as a Messages provider gets it: its model id
// and the max_tokens the gateway reserved (Messages requires one).
func (c *messagesRequest) upstreamBody(m v1alpha1.Model, maxTokens int64) []byte {
	c.fields[fieldModel], _ = json.Marshal(upstreamModel(m))
	if maxTokens <= 0 {
		maxTokens = c.maxTokens
	}
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	c.fields[fieldMaxTokens], _ = json.Marshal(maxTokens)
	out, _ := json.Marshal(c.fields)
	return out
}

func upstreamModel(m v1alpha1.Model) string {
	if m.UpstreamModel != "" {
		return m.UpstreamModel
	}
	return m.Name
}

// finalizeOnly refuses a research model request while the run is
// finalizing: the agent's view may lag the phase, and a research turn must
// not spend the reserve.
func finalizeOnly(spec v1alpha1.RunAttemptSpec, r *http.Request) *apiError {
	if isFinalizing(spec) && r.Header.Get(gatewayapi.HeaderPurpose) == gatewayapi.PurposeResearch {
		return errGrant(gatewayapi.CodeFinalizeOnly,
			"the run is finalizing: the reserve serves only output work, and this model request declared purpose research")
	}
	return nil
}

// spanProvider names the provider of m on span (gen_ai.provider.name, the
// semantic conventions' successor of gen_ai.system).
func spanProvider(span trace.Span, m v1alpha1.Model) {
	switch m.API {
	case v1alpha1.ModelAPIAnthropicMessages:
		span.SetAttributes(semconv.GenAIProviderNameAnthropic)
	default:
		span.SetAttributes(semconv.GenAIProviderNameOpenAI)
	}
}

// messages serves POST /v1/messages through the shared flow
// (serveModelCall): passed through to an AnthropicMessages provider, or
// translated to a chat provider.
func (g *Gateway) messages(w http.ResponseWriter, r *http.Request, k *keeper) {
	g.serveModelCall(w, r, k, func(r *http.Request) (*modelCall, *apiError) {
		c, e := parseMessages(r)
		if e != nil {
			return nil, e
		}
		var tc *messagesToChat
		return &modelCall{
			model: c.model, stream: c.stream, maxTokens: c.maxTokens, choices: 1,
			shape: shapeOf(c.model, len(c.body), c.fields, jMessages),
			prepare: func(m v1alpha1.Model) (int64, *apiError) {
				switch m.API {
				case v1alpha1.ModelAPIAnthropicMessages:
				case v1alpha1.ModelAPIOpenAIChat, "":
					var e *apiError
					if tc, e = translateMessagesToChat(c); e != nil {
						return 0, e
					}
				default:
					return 0, errInvalid(fieldModel, fmt.Sprintf("model %q is served by a provider that speaks %s, and this "+
						"gateway does not translate Anthropic Messages to it: use the %s door", m.Name, m.API, m.API))
				}
				return int64(len(c.body)), nil
			},
			dispatch: func(ctx context.Context, x *exchange, mt int64, key string) {
				if tc != nil {
					x.forwardMessagesToChat(ctx, tc, mt, key)
					return
				}
				x.forwardMessages(ctx, r.Header, c.upstreamBody(x.m, mt), key, c.stream)
			},
		}, nil
	})
}

// messagesUsage is the usage a Messages provider reports.
type messagesUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// charged is what the usage charges: every input token, cached or written
// to the cache, plus the output; less than one token, or a negative part,
// is no report (the reservation is charged).
func (u *messagesUsage) charged() (tokenUse, bool) {
	if u == nil || u.InputTokens < 0 || u.CacheCreationInputTokens < 0 || u.CacheReadInputTokens < 0 || u.OutputTokens < 0 {
		return tokenUse{}, false
	}
	t := tokenUse{input: u.InputTokens, cacheWrite: u.CacheCreationInputTokens, cacheRead: u.CacheReadInputTokens, output: u.OutputTokens}
	return t, t.total() >= 1
}

// upstreamRequest builds the request to a Messages provider: its key in
// x-api-key, the client's anthropic-version and anthropic-beta, nothing
// else of the client's headers (never its token).
func (x *exchange) messagesRequest(ctx context.Context, path string, in http.Header, out []byte, key string,
	streamed bool) (*http.Request, error) {
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(x.m.BaseURL, "/")+path, bytes.NewReader(out))
	if err != nil {
		return nil, err
	}
	setMessagesHeaders(ureq, in, key, streamed)
	return ureq, nil
}

func setMessagesHeaders(ureq *http.Request, in http.Header, key string, streamed bool) {
	ureq.Header.Set("Content-Type", "application/json")
	ureq.Header.Set("Accept", "application/json")
	if streamed {
		ureq.Header.Set("Accept", "text/event-stream")
	}
	if key != "" {
		ureq.Header.Set("x-api-key", key)
	}
	v := in.Get("anthropic-version")
	if v == "" {
		v = anthropicVersion
	}
	ureq.Header.Set("anthropic-version", v)
	for _, b := range in.Values("anthropic-beta") {
		ureq.Header.Add("anthropic-beta", b)
	}
}

// forwardMessages sends a Messages request to a Messages provider and
// relays the answer as it comes, counting the usage it reports.
func (x *exchange) forwardMessages(rctx context.Context, in http.Header, out []byte, key string, streamed bool) {
	g, m := x.g, x.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), boundedTimeout(g.opts.UpstreamTimeout, x.ticket.until, g.clock.Now()))
	defer cancel()
	x.dispatched = g.clock.Now()
	x.done = x.dispatched
	ureq, err := x.messagesRequest(ctx, "/messages", in, out, key, streamed)
	if err != nil {
		x.count(jError, tokenUse{}, true)
		writeError(x.w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable, err.Error()))
		return
	}
	spanUpstream(rctx, ureq, m)
	resp, err := g.opts.Upstream.Do(ureq)
	if err != nil {
		x.unreachable(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode != http.StatusOK:
		x.upstreamError(resp, key)
	case !streamed && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, g.opts.MaxModelResponseBytes+1))
		x.done = g.clock.Now()
		if int64(len(raw)) > g.opts.MaxModelResponseBytes {
			x.tooLarge(fmt.Sprintf("its answer exceeds the gateway's bound of %d bytes (--max-model-response-bytes)",
				g.opts.MaxModelResponseBytes))
			return
		}
		var u struct {
			Usage *messagesUsage `json:"usage"`
		}
		var tokens tokenUse
		reported := false
		if rerr == nil && json.Unmarshal(raw, &u) == nil {
			tokens, reported = u.Usage.charged()
			spanMessagesUsage(rctx, u.Usage)
		}
		if rerr != nil {
			x.k.providerFault("ResponseCut", true, fmt.Sprintf("model %s: %v", m.Name, rerr))
		}
		copyHeader(x.w, resp, "Content-Type")
		x.w.WriteHeader(http.StatusOK)
		_, _ = x.w.Write(raw)
		x.stream(func(tr *openai.Translator) []stream.Event {
			return append(tr.Completion(messageAsChat(raw)), tr.End(rerr)...)
		})
		x.k.noteAnswer(chatCompletionDigest(messageAsChat(raw)))
		x.count("ok", tokens, reported)
	default:
		var cut error
		st := &messagesStreamState{}
		digest := newAnswerDigest()
		u := g.relayMessages(x.w, resp, x.k, m.Name, func(payload []byte) {
			if chunk := st.asChunk(payload); chunk != nil {
				digest.chatChunk(chunk)
				x.stream(func(tr *openai.Translator) []stream.Event { return tr.Chunk(chunk) })
			}
		}, &cut)
		x.k.noteAnswer(digest.sum())
		spanMessagesUsage(rctx, u)
		tokens, reported := u.charged()
		x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(cut) })
		x.done = g.clock.Now()
		outcome := "ok"
		if !reported {
			outcome = outcomeStreamCut
		}
		x.count(outcome, tokens, reported)
	}
}

func spanMessagesUsage(ctx context.Context, u *messagesUsage) {
	if u == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(
		semconv.GenAIUsageInputTokens(int(u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens)),
		semconv.GenAIUsageOutputTokens(int(u.OutputTokens)))
}

// relayMessages copies a Messages event stream to the client unchanged, line
// by line (each bounded like the chat door's), reading the usage of
// message_start and the cumulative output of message_delta. The usage counts
// as reported only once message_stop arrived: a stream cut before it is
// charged its reservation, as on the chat door (nil: no usage to count).
func (g *Gateway) relayMessages(w http.ResponseWriter, resp *http.Response, k *keeper, model string,
	onData func([]byte), cut *error) *messagesUsage {
	fl, _ := w.(http.Flusher)
	copyHeader(w, resp, "Content-Type")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	clientGone := false
	var u messagesUsage
	seen, done := false, false
	var streamErr string
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
					Type    string `json:"type"`
					Message struct {
						Usage *messagesUsage `json:"usage"`
					} `json:"message"`
					Usage *messagesUsage `json:"usage"`
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if json.Unmarshal(payload, &ev) == nil {
					switch ev.Type {
					case "message_start":
						if ev.Message.Usage != nil {
							u, seen = *ev.Message.Usage, true
						}
					case "message_delta":
						if d := ev.Usage; d != nil {
							u.add(d)
							seen = true
						}
					case "message_stop":
						done = true
					case jError:
						streamErr = ev.Error.Message
					}
					onData(payload)
				}
			}
			if !clientGone {
				if _, werr := w.Write(line); werr != nil {
					clientGone = true
				} else if fl != nil && len(bytes.TrimRight(line, "\r\n")) == 0 {
					fl.Flush()
				}
			}
		}
		if err != nil {
			if fl != nil && !clientGone {
				fl.Flush()
			}
			if !done {
				why := fmt.Sprintf("%v", err)
				if streamErr != "" {
					why = "the provider sent an error event: " + streamErr
				}
				k.providerFault("StreamCut", true, fmt.Sprintf("model %s: the stream ended before message_stop: %s", model, why))
				*cut = fmt.Errorf("the provider's stream ended before message_stop: %s", why)
				return nil
			}
			if !seen {
				return nil
			}
			return &u
		}
	}
}

// countTokens serves POST /v1/messages/count_tokens. It is not a model
// request: nothing is reserved or counted. A Messages provider counts the
// tokens (the request passes through); for any other provider the gateway
// answers its own prompt bound — the body's bytes, which no tokenizer maps
// to fewer tokens — and says so in agentrun-estimate: bytes.
func (g *Gateway) countTokens(w http.ResponseWriter, r *http.Request, k *keeper) {
	if e := k.enter(fieldModel); e != nil {
		writeError(w, e)
		return
	}
	defer k.leave()
	c, e := parseMessages(r)
	if e != nil {
		writeError(w, e)
		return
	}
	k.mu.Lock()
	spec, e := k.obj.Spec, k.stoppedLocked()
	k.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	m, e := serveModel(spec, c.model)
	if e != nil {
		writeError(w, e)
		return
	}
	if m.API != v1alpha1.ModelAPIAnthropicMessages {
		w.Header().Set(HeaderEstimate, "bytes")
		writeJSON(w, map[string]int64{"input_tokens": int64(len(c.body))})
		return
	}
	key, err := g.secrets.key(r.Context(), k.key.Namespace, m.APIKeySecretRef)
	if err != nil {
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeProviderKeyUnavailable,
			fmt.Sprintf("the gateway could not read the provider key of model %q: %v", m.Name, err)))
		return
	}
	c.fields[fieldModel], _ = json.Marshal(upstreamModel(m))
	out, _ := json.Marshal(c.fields)
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.UpstreamTimeout)
	defer cancel()
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.BaseURL, "/")+"/messages/count_tokens",
		bytes.NewReader(out))
	if err != nil {
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable, err.Error()))
		return
	}
	setMessagesHeaders(ureq, r.Header, key, false)
	resp, err := g.opts.Upstream.Do(ureq)
	if err != nil {
		writeError(w, newError(http.StatusBadGateway, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable,
			fmt.Sprintf("the provider of model %q could not be reached: %v", m.Name, err)))
		return
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxProviderErrorBytes+1))
	if resp.StatusCode != http.StatusOK || len(raw) > MaxProviderErrorBytes {
		e, _ := providerError(m.Name, resp.StatusCode, raw, len(raw) > MaxProviderErrorBytes, key)
		writeError(w, e)
		return
	}
	copyHeader(w, resp, "Content-Type")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
}

// HeaderEstimate marks an answer the gateway estimated instead of the
// provider: its value says how (bytes: one token per byte, an upper bound).
const HeaderEstimate = "agentrun-estimate"
