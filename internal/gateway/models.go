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
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/openai"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// maxModelBody bounds a chat completion request body.
const maxModelBody = 8 << 20

// The model door: OpenAI-compatible chat completions, forwarded to the
// provider the attempt's policy names, with the provider key only the
// gateway holds. Every request dispatched upstream is counted (failed ones
// too); tokens are what the provider reports. Before dispatch the gateway
// reserves, against a token grant, an upper bound of what the request can
// use — the request body's length in bytes (no tokenizer maps less than one
// byte to a token), or for a turn that extends an answered one that one's
// charge plus its new messages' bytes (reservation.go), plus its max_tokens,
// which the gateway lowers to fit — so no request can cross the grant; it
// settles on the reported usage.

func (g *Gateway) listModels(w http.ResponseWriter, _ *http.Request, k *keeper) {
	k.mu.Lock()
	models := slices.Clone(k.obj.Spec.Policy.Models)
	k.mu.Unlock()
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range models {
		out.Data = append(out.Data, model{ID: m.Name, Object: "model", OwnedBy: "agentrun"})
	}
	writeJSON(w, out)
}

// modelTicket is one admitted model request: what it reserved.
type modelTicket struct {
	reserved int64
	// prompt is the reserved prompt bound (the rest of reserved is the
	// completion caps); shape is the request's prompt, remembered with
	// its charge.
	prompt int64
	shape  *promptShape
	// cost is the cost reserved (with a cost grant), prices the model's.
	cost   v1alpha1.Money
	prices *v1alpha1.ModelPrices
	// until is when the request must be over: the run's deadline
	// (callWindow), or the zero time.
	until time.Time
}

// wireUsage is the usage a provider reports with an answer.
type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// charged is what a reported usage charges, and whether it counts as
// reported at all: the larger of the total and the sum of its parts (a
// provider cannot undercount by leaving one out; tokens the parts leave
// out are priced as output), and a usage of less than one token — zero,
// negative, missing — is no report: the request is charged its
// reservation, as for a cut stream. Cached prompt tokens are part of the
// prompt's, priced as cache reads.
func (u *wireUsage) charged() (tokenUse, bool) {
	if u == nil {
		return tokenUse{}, false
	}
	t := max(u.TotalTokens, u.PromptTokens+u.CompletionTokens)
	if t < 1 || u.PromptTokens < 0 || u.CompletionTokens < 0 {
		return tokenUse{}, false
	}
	cached := min(max(u.PromptTokensDetails.CachedTokens, 0), u.PromptTokens)
	return tokenUse{input: u.PromptTokens - cached, cacheRead: cached, output: t - (u.PromptTokens - cached) - cached}, true
}

// admitModel checks the phase and the grant, counts the request as
// dispatched and reserves its token bound. It returns the max_tokens to
// send (0: leave the request's own).
func (k *keeper) admitModel(ctx context.Context, m v1alpha1.Model, promptBound, requested, choices int64,
) (*modelTicket, int64, *apiError) {
	t, mt, target, e := k.admitModelLocked(m, promptBound, requested, choices)
	if e != nil {
		return nil, 0, k.durableRefusal(ctx, e)
	}
	if target == 0 {
		return t, mt, nil
	}
	// Durable admission: the count is on the API server before the request
	// leaves. If it cannot be written, the request is not dispatched (and
	// stays counted: the count errs on the side of the grant).
	if err := k.waitWritten(ctx, target); err != nil {
		k.settle(t, tokenUse{}, true)
		return nil, 0, errNotPersisted("the model request was not dispatched: its admission could not be made durable: " + err.Error())
	}
	return t, mt, nil
}

// choices is the number of completions the request asks for (n): each may
// generate max_tokens, so the reservation is the prompt plus choices times
// the cap.
func (k *keeper) admitModelLocked(m v1alpha1.Model, promptBound, requested, choices int64) (*modelTicket, int64, uint64, *apiError) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.stoppedLocked(); e != nil {
		return nil, 0, 0, e
	}
	spec := k.obj.Spec
	until, e := callWindow(spec, k.g.clock.Now(), k.g.opts.MinCallTime)
	if e != nil {
		return nil, 0, 0, e
	}
	gr, u := k.grantLocked(), k.facts.usage
	fin := isFinalizing(spec)
	if u.ModelRequests >= gr.ModelRequests {
		return nil, 0, 0, k.grantRefusalLocked(fin, v1alpha1.BudgetUnitModelRequests, u.ModelRequests, gr.ModelRequests,
			fmt.Sprintf("%d/%d model requests", u.ModelRequests, gr.ModelRequests))
	}
	mt := requested
	capTokens := compressedMaxTokens(spec, m.MaxTokens)
	if capTokens != nil && (mt <= 0 || mt > *capTokens) {
		mt = *capTokens
	}
	t := &modelTicket{until: until, prices: m.Prices}
	if gr.Cost != nil {
		if mt, e = k.costRoomLocked(gr, fin, m.Name, m.Prices, promptBound, choices, mt); e != nil {
			return nil, 0, 0, e
		}
		t.cost = costBound(m.Prices, promptBound, max(choices, 1)*mt)
	}
	if gr.Tokens != nil {
		remaining := *gr.Tokens - u.Tokens - k.tokens
		room := (remaining - promptBound) / max(choices, 1)
		if room < 1 {
			return nil, 0, 0, k.grantRefusalLocked(fin, v1alpha1.BudgetUnitTokens, u.Tokens+k.tokens, *gr.Tokens, fmt.Sprintf(
				"%d/%d tokens (%d reserved by requests under way; this request's prompt may use up to %d, and each of its %d choices at least 1)",
				u.Tokens, *gr.Tokens, k.tokens, promptBound, max(choices, 1)))
		}
		if mt <= 0 {
			mt = DefaultMaxTokens
		}
		mt = min(mt, room)
		t.reserved, t.prompt = promptBound+max(choices, 1)*mt, promptBound
		k.tokens += t.reserved
		t.cost = min(t.cost, costBound(m.Prices, promptBound, max(choices, 1)*mt))
	}
	k.cost += t.cost
	k.facts.usage.ModelRequests++
	if k.g.opts.DurableAdmission {
		k.markLocked(true)
		return t, mt, k.seq, nil
	}
	k.markLocked(false)
	return t, mt, k.baseUnwrittenLocked(), nil
}

// settle ends a model request: the reservation is released and the tokens
// the provider reported are charged, with their cost, or — when it
// reported none (a cut stream, a timeout) — the reservation.
func (k *keeper) settle(t *modelTicket, use tokenUse, reported bool) (int64, v1alpha1.Money) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tokens -= t.reserved
	k.cost -= t.cost
	charge, cost := use.total(), use.cost(t.prices)
	if !reported {
		charge, cost = t.reserved, t.cost
	} else {
		k.prompts = rememberPrompt(k.prompts, t.shape, charge)
	}
	if charge > 0 || cost > 0 {
		k.facts.usage.Tokens += charge
		k.facts.usage.Cost += cost
		k.markLocked(false)
	}
	return charge, cost
}

func (k *keeper) providerFault(kind string, retryable bool, msg string) {
	k.record(func() { k.facts.addFault(v1alpha1.FaultScopeProvider, kind, retryable, false, msg) })
}

// chatRequest is a parsed chat completion request: its fields as sent
// (unknown ones pass through to the provider untouched) and what the
// gateway reads of them.
type chatRequest struct {
	body        []byte
	fields      map[string]json.RawMessage
	model       string
	stream      bool
	tokensField string // max_tokens, or max_completion_tokens when the client uses it
	maxTokens   int64  // as requested, 0 if none
	choices     int64  // n: completions asked for, 1 if unset
	conv        string // fingerprint of the conversation's instructions
	// msgs are the request's messages, decoded once for the fingerprint
	// and the prompt's shape.
	msgs []json.RawMessage
}

// conversationFingerprint hashes what a conversation is about: its system,
// developer and user messages, not the assistant's turns or tool results
// (those grow every step, and a loop repeats in the same conversation).
// Tool calls that follow the request are fingerprinted in this context.
func conversationFingerprint(msgs []json.RawMessage) string {
	h := sha256.New()
	var b bytes.Buffer
	for _, raw := range msgs {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch m.Role {
		case "system", "developer", "user":
			b.Reset()
			if json.Compact(&b, m.Content) != nil {
				b.Reset()
				b.Write(m.Content)
			}
			h.Write([]byte(m.Role))
			h.Write([]byte{0})
			h.Write(b.Bytes())
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// parseChat reads and checks a chat completion request.
func parseChat(r *http.Request) (*chatRequest, *apiError) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxModelBody+1))
	switch {
	case err != nil:
		return nil, errInvalid("", "could not read the request body: "+err.Error())
	case len(body) > maxModelBody:
		return nil, errInvalid("", fmt.Sprintf("the request body exceeds %d bytes", maxModelBody))
	}
	c := &chatRequest{body: body, tokensField: fieldMaxTokens, choices: 1}
	if err := json.Unmarshal(body, &c.fields); err != nil || c.fields == nil {
		return nil, errInvalid("", "the body must be a JSON object (a chat completion request)")
	}
	if e := refuseFoldedKeys(c.fields, chatControlled, ""); e != nil {
		return nil, e
	}
	if raw, ok := c.fields["stream_options"]; ok {
		var so map[string]json.RawMessage
		if json.Unmarshal(raw, &so) == nil {
			if e := refuseFoldedKeys(so, []string{"include_usage"}, "stream_options."); e != nil {
				return nil, e
			}
		}
	}
	if raw, ok := c.fields["n"]; ok && string(raw) != jsonNull {
		if json.Unmarshal(raw, &c.choices) != nil || c.choices < 1 || c.choices > maxChoices {
			return nil, errInvalid("n", fmt.Sprintf("n must be an integer from 1 to %d", maxChoices))
		}
	}
	if err := json.Unmarshal(c.fields[fieldModel], &c.model); err != nil || c.model == "" {
		return nil, errInvalid(fieldModel, "model is required: a string naming one of the models the run's policy serves")
	}
	if err := json.Unmarshal(c.fields["messages"], &c.msgs); err != nil || len(c.msgs) == 0 {
		return nil, errInvalid("messages", "messages is required: a non-empty array")
	}
	c.conv = conversationFingerprint(c.msgs)
	if raw, ok := c.fields["stream"]; ok && json.Unmarshal(raw, &c.stream) != nil {
		return nil, errInvalid("stream", "stream must be a boolean")
	}
	if _, ok := c.fields[fieldMaxCompletionTokens]; ok {
		c.tokensField = fieldMaxCompletionTokens
	}
	// A provider may read either field as the completion's cap: the request
	// asks for the smaller of those it sets.
	for _, name := range tokenCapFields {
		raw, ok := c.fields[name]
		if !ok || string(raw) == jsonNull {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 {
			return nil, errInvalid(name, name+" must be a positive integer")
		}
		if c.maxTokens == 0 || n < c.maxTokens {
			c.maxTokens = n
		}
	}
	return c, nil
}

// chatControlled are the fields of a chat request the gateway reads or
// rewrites; maxChoices bounds n.
var chatControlled = []string{fieldModel, "messages", "stream", "stream_options", fieldMaxTokens, fieldMaxCompletionTokens, "n"}

const maxChoices = 16

// refuseFoldedKeys refuses a key that is not one of controlled but equals
// one under Unicode case folding ("max_to\u212aens", with a Kelvin sign,
// or "MAX_TOKENS"): the gateway reads and rewrites the exact key, but
// encoding/json and the providers built on it match keys case-insensitively,
// and the last of two matching keys wins, so a folded twin would carry a
// value the gateway never saw past its rewrite.
func refuseFoldedKeys(fields map[string]json.RawMessage, controlled []string, prefix string) *apiError {
	for key := range fields {
		for _, c := range controlled {
			if key != c && strings.EqualFold(key, c) {
				return errInvalid(prefix+c, fmt.Sprintf(
					"%q is refused: it is %s%s under case folding, a field the gateway controls; send %q exactly", key, prefix, c, prefix+c))
			}
		}
	}
	return nil
}

// tokenCapFields are the request fields a provider reads as the
// completion's token cap.
var tokenCapFields = []string{fieldMaxTokens, fieldMaxCompletionTokens}

// jsonNull is a JSON null: a field set to null is not set.
const jsonNull = "null"

// upstreamBody is the request as the provider gets it: its model id, the
// max_tokens the gateway reserved, and usage forced on a stream. It reports
// whether the client itself asked for the usage chunk.
func (c *chatRequest) upstreamBody(m v1alpha1.Model, maxTokens int64) ([]byte, bool) {
	id := m.UpstreamModel
	if id == "" {
		id = m.Name
	}
	c.fields[fieldModel], _ = json.Marshal(id)
	if maxTokens > 0 {
		// Every cap the request sets says what the gateway reserved, so the
		// provider cannot generate more whichever field it reads.
		c.fields[c.tokensField], _ = json.Marshal(maxTokens)
		for _, name := range tokenCapFields {
			if raw, ok := c.fields[name]; ok && string(raw) != jsonNull {
				c.fields[name], _ = json.Marshal(maxTokens)
			}
		}
	}
	clientUsage := false
	if c.stream {
		var so map[string]json.RawMessage
		_ = json.Unmarshal(c.fields["stream_options"], &so)
		if so == nil {
			so = map[string]json.RawMessage{}
		}
		_ = json.Unmarshal(so["include_usage"], &clientUsage)
		so["include_usage"] = json.RawMessage("true")
		c.fields["stream_options"], _ = json.Marshal(so)
	}
	out, _ := json.Marshal(c.fields)
	return out, clientUsage
}

const (
	fieldModel               = "model"
	fieldMaxTokens           = "max_tokens"
	fieldMaxCompletionTokens = "max_completion_tokens"
)

// chatCompletions serves POST /v1/chat/completions.
func (g *Gateway) chatCompletions(w http.ResponseWriter, r *http.Request, k *keeper) {
	g.serveModelCall(w, r, k, func(r *http.Request) (*modelCall, *apiError) {
		c, e := parseChat(r)
		if e != nil {
			return nil, e
		}
		return &modelCall{
			model: c.model, stream: c.stream, maxTokens: c.maxTokens, choices: c.choices, conv: c.conv,
			shape: shapeOfItems(c.model, len(c.body), c.fields, jMessages, c.msgs),
			prepare: func(m v1alpha1.Model) (int64, *apiError) {
				switch m.API {
				case "", v1alpha1.ModelAPIOpenAIChat:
				case v1alpha1.ModelAPIAnthropicMessages:
					return boundAsMessages(c.body)
				default:
					return 0, errInvalid(fieldModel, fmt.Sprintf("model %q is served by a provider that speaks %s, and this gateway "+
						"does not translate chat completions to it: use the %s door", m.Name, m.API, m.API))
				}
				return int64(len(c.body)), nil
			},
			dispatch: func(ctx context.Context, x *exchange, mt int64, key string) {
				out, clientUsage := c.upstreamBody(x.m, mt)
				x.forward(ctx, out, key, c.stream, clientUsage)
			},
		}, nil
	})
}

// modelCall is one model request through one of the doors (chat
// completions, responses, messages), as the shared flow reads it: the door parses the
// request and dispatches it; the flow serves the model, admits the request
// against the grant and counts it, the same whichever door it came through.
type modelCall struct {
	model     string
	stream    bool
	maxTokens int64  // the completion cap as requested, 0 if none
	choices   int64  // completions asked for
	conv      string // the conversation's fingerprint, if the door reads one
	// shape is the request's prompt, which may bound it tighter than its
	// bytes (reservation.go); nil if the door reads none.
	shape *promptShape
	// prepare checks that the door can serve model m (its provider's API,
	// the request's features) and returns the request's prompt bound.
	prepare func(m v1alpha1.Model) (int64, *apiError)
	// dispatch sends the admitted request, with mt as its completion cap
	// (0: the request's own), and answers the client through x.
	dispatch func(ctx context.Context, x *exchange, mt int64, key string)
}

// serveModelCall serves a model request of any door: the phase, the model,
// the purpose, the provider key, the interceptor chain, the reservation, the
// dispatch and the count.
func (g *Gateway) serveModelCall(w http.ResponseWriter, r *http.Request, k *keeper,
	parse func(*http.Request) (*modelCall, *apiError)) {
	in := arrivalOf(r.Context(), g.clock.Now())
	if e := k.enter("model"); e != nil {
		writeError(w, e)
		return
	}
	defer k.leave()
	c, e := parse(r)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, span := k.startModelSpan(r, c.model, c.maxTokens)
	sw := &statusWriter{ResponseWriter: w}
	var x *exchange
	defer func() { endModelSpan(span, sw, x) }()
	w, r = sw, r.WithContext(ctx)
	k.mu.Lock()
	spec := k.obj.Spec
	if c.conv != "" {
		k.conv = c.conv
	}
	k.mu.Unlock()
	m, e := serveModel(spec, c.model)
	if e != nil {
		writeError(w, e)
		return
	}
	spanProvider(span, m)
	promptBound, e := c.prepare(m)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := finalizeOnly(spec, r); e != nil {
		k.refusal(e, "model/"+c.model)
		writeError(w, e)
		return
	}
	key, err := g.secrets.key(r.Context(), k.key.Namespace, m.APIKeySecretRef)
	if err != nil {
		g.log.Error(err, "Could not read a provider key", "runattempt", k.key, fieldModel, m.Name)
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeProviderKeyUnavailable,
			fmt.Sprintf("the gateway could not read the provider key of model %q: %v", m.Name, err)))
		return
	}
	ch, err := k.interceptors()
	if err != nil {
		e := newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeInterceptorRefused,
			fmt.Sprintf("RuntimePolicy %q's interceptor chain cannot run in this gateway, so no model request is made: %v", spec.Policy.Name, err))
		e.fault = "InterceptorUnavailable"
		k.refusal(e, "model/"+c.model)
		writeError(w, e)
		return
	}
	// The chain runs around the request: Pre and Around interceptors may
	// refuse it before anything is reserved; Post interceptors see its
	// outcome (a streamed answer is already on its way: they observe it,
	// they cannot withhold it).
	cc := &chain.Call{
		Kind: chain.KindModel, Namespace: k.key.Namespace, Run: spec.RunName, Attempt: k.key.Name, Policy: spec.Policy.Name,
		Token: bearer(r), Tool: m.Name, Arguments: map[string]any{"stream": c.stream},
	}
	var upstream time.Duration
	_, ref := k.runChain(context.WithValue(r.Context(), modelCallKey{}, true), ch, cc, func(ctx context.Context, _ *chain.Call) chain.Outcome {
		ticket, mt, e := k.admitModel(ctx, m, k.tightPrompt(c.shape, promptBound), c.maxTokens, c.choices)
		if e != nil {
			k.refusal(e, "model/"+c.model)
			writeError(w, e)
			return chain.Outcome{IsError: true, Result: e.body.Message}
		}
		ticket.shape = c.shape
		if mt > 0 && c.maxTokens > 0 && mt < c.maxTokens {
			w.Header().Set(HeaderMaxTokensClamped, strconv.FormatInt(mt, 10))
		}
		x = &exchange{g: g, k: k, w: w, m: m, ticket: ticket, labels: []string{k.key.Namespace, spec.Policy.Name, m.Name},
			tr: k.modelTranslator()}
		c.dispatch(ctx, x, mt, key)
		upstream = x.done.Sub(x.dispatched)
		return chain.Outcome{IsError: x.outcome != "ok", Result: x.outcome}
	})
	if ref != nil {
		if ref.Dispatched {
			k.log.Info("A Post interceptor failed after a model answer was sent", "model", m.Name, "error", ref.Error())
			return
		}
		e := errInterceptor(ref)
		k.refusal(e, "model/"+c.model)
		writeError(w, e)
		return
	}
	g.metrics.upstreamSeconds.WithLabelValues(m.Name).Observe(upstream.Seconds())
	g.observeAdded(in, upstream)
}

// modelCallKey marks the context of a model request's chain: its auth
// interceptor checks the token with the cached authenticator (a fresh
// TokenReview per model request would double the API server's load for a
// call without side effects); tool calls get a fresh review.
type modelCallKey struct{}

// exchange is one admitted model request on its way to the provider and back.
type exchange struct {
	g                *Gateway
	k                *keeper
	w                http.ResponseWriter
	m                v1alpha1.Model
	ticket           *modelTicket
	labels           []string
	dispatched, done time.Time
	outcome          string
	cost             v1alpha1.Money // charged (chargedCost)
	// tr turns the answer into run-stream events (nil: no stream).
	tr *openai.Translator
	// answer digests a translated stream's answer (progress.go).
	answer *answerDigest
}

// count settles the request's tokens and counts its outcome.
func (x *exchange) count(outcome string, tokens tokenUse, reported bool) {
	x.outcome = outcome
	charged, cost := x.k.settle(x.ticket, tokens, reported)
	x.chargedCost(cost)
	x.g.metrics.modelRequests.WithLabelValues(append(x.labels, outcome)...).Inc()
	x.g.metrics.tokens.WithLabelValues(x.labels...).Add(float64(charged))
	if t := x.ticket; t.reserved > 0 {
		x.g.metrics.reserved.WithLabelValues(append(x.labels, "prompt")...).Add(float64(t.prompt))
		x.g.metrics.reserved.WithLabelValues(append(x.labels, "completion")...).Add(float64(t.reserved - t.prompt))
	}
	x.g.metrics.sessionModelRequest(x.k, charged)
}

// forward sends the request upstream and relays the answer. The upstream
// request outlives a client that leaves: the provider charges it anyway, so
// the gateway reads on to count what it reports.
func (x *exchange) forward(rctx context.Context, out []byte, key string, streamed, clientUsage bool) {
	g, m := x.g, x.m
	resp, cancel := x.send(rctx, "/chat/completions", out, key, streamed)
	if resp == nil {
		return
	}
	defer cancel()
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode != http.StatusOK:
		x.upstreamError(resp, key)
	case !streamed:
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, g.opts.MaxModelResponseBytes+1))
		x.done = g.clock.Now()
		if int64(len(raw)) > g.opts.MaxModelResponseBytes {
			x.tooLarge(fmt.Sprintf("its answer exceeds the gateway's bound of %d bytes (--max-model-response-bytes)",
				g.opts.MaxModelResponseBytes))
			return
		}
		var u struct {
			Usage *wireUsage `json:"usage"`
		}
		var tokens tokenUse
		reported := false
		if rerr == nil && json.Unmarshal(raw, &u) == nil {
			tokens, reported = u.Usage.charged()
		}
		spanUsage(rctx, raw)
		if rerr != nil {
			x.k.providerFault("ResponseCut", true, fmt.Sprintf("model %s: %v", m.Name, rerr))
		}
		copyHeader(x.w, resp, "Content-Type")
		x.w.WriteHeader(http.StatusOK)
		_, _ = x.w.Write(raw)
		x.stream(func(tr *openai.Translator) []stream.Event { return append(tr.Completion(raw), tr.End(rerr)...) })
		x.k.noteAnswer(chatCompletionDigest(raw))
		x.count("ok", tokens, reported)
	default:
		var cut error
		digest := newAnswerDigest()
		tokens, reported := g.relayStream(x.w, resp, clientUsage, x.k, m.Name, func(payload []byte) {
			spanUsage(rctx, payload)
			digest.chatChunk(payload)
			x.stream(func(tr *openai.Translator) []stream.Event { return tr.Chunk(payload) })
		}, &cut)
		x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(cut) })
		x.k.noteAnswer(digest.sum())
		x.done = g.clock.Now()
		outcome := "ok"
		if !reported {
			outcome = "stream_cut"
		}
		x.count(outcome, tokens, reported)
	}
}

// send posts out to the provider's path (under its base URL) with the
// provider key, and returns its answer and the cancel of the answer's
// context; a request that could not be sent is counted and answered (nil).
// The provider's answer may take the upstream timeout, and never past the
// run's deadline.
func (x *exchange) send(rctx context.Context, path string, out []byte, key string, streamed bool) (*http.Response, context.CancelFunc) {
	g, m := x.g, x.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), boundedTimeout(g.opts.UpstreamTimeout, x.ticket.until, g.clock.Now()))
	x.dispatched = g.clock.Now()
	x.done = x.dispatched
	toMessages := isChatToMessages(m, path)
	var ureq *http.Request
	var err error
	if toMessages {
		ureq, err = x.chatAsMessagesRequest(ctx, out, key, streamed)
	} else {
		ureq, err = http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.BaseURL, "/")+path, bytes.NewReader(out))
	}
	if err != nil {
		cancel()
		x.count("error", tokenUse{}, true)
		writeError(x.w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable, err.Error()))
		return nil, nil
	}
	if !toMessages {
		ureq.Header.Set("Content-Type", "application/json")
		ureq.Header.Set("Accept", "application/json")
		if streamed {
			ureq.Header.Set("Accept", "text/event-stream")
		}
		if key != "" {
			ureq.Header.Set("Authorization", "Bearer "+key)
		}
	}
	spanUpstream(rctx, ureq, m)
	resp, err := g.opts.Upstream.Do(ureq)
	if err != nil {
		cancel()
		x.unreachable(err)
		return nil, nil
	}
	if toMessages {
		x.answerAsChat(resp, streamed)
	}
	return resp, cancel
}

// unreachable answers a request the provider could not be reached for (or
// timed out): counted as a model request and a Provider fault, and charged
// its reservation (the provider may have done the work).
func (x *exchange) unreachable(err error) {
	x.done = x.g.clock.Now()
	kind, status := "Unavailable", http.StatusBadGateway
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		kind, status = "Timeout", http.StatusGatewayTimeout
	}
	x.k.providerFault(kind, true, fmt.Sprintf("model %s: %v", x.m.Name, err))
	x.count("error", tokenUse{}, false)
	writeError(x.w, newError(status, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable,
		fmt.Sprintf("the provider of model %q could not be reached: %v (counted as a model request)", x.m.Name, err)))
}

// tooLarge answers a request whose answer the gateway will not hold: the
// request was dispatched, so it is counted, and charged its reservation
// (the usage is in the part not read); a Provider fault says why.
func (x *exchange) tooLarge(why string) {
	err := fmt.Errorf("model %s: %s", x.m.Name, why)
	x.k.providerFault("ResponseTooLarge", false, err.Error())
	x.stream(func(tr *openai.Translator) []stream.Event { return tr.End(err) })
	x.count("too_large", tokenUse{}, false)
	x.g.metrics.tooLarge.WithLabelValues("model").Inc()
	writeError(x.w, newError(http.StatusBadGateway, gatewayapi.TypeServer, gatewayapi.CodeUpstreamResponseTooLarge,
		fmt.Sprintf("the provider of model %q answered, but %s; the request was dispatched and is counted, "+
			"with its token reservation charged. Ask for a shorter answer (max_tokens, n) or stream it", x.m.Name, why)))
}

// upstreamError answers a provider's error answer in the door's own shape
// (providerError: the status, a short sanitized message, never the raw
// body), with the provider's well-formed retry hints: counted as a model
// request (it used no tokens) and a Provider fault named after the
// provider's error code.
func (x *exchange) upstreamError(resp *http.Response, key string) {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxProviderErrorBytes+1))
	truncated := len(raw) > MaxProviderErrorBytes
	x.done = x.g.clock.Now()
	e, summary := providerError(x.m.Name, resp.StatusCode, raw, truncated, key)
	kind, retryable := gatewayapi.ProviderFault(e.status)
	if e.body.Code != "" {
		kind = gatewayapi.FaultKind(e.body.Code)
	}
	x.k.providerFault(kind, retryable, fmt.Sprintf("model %s: %s", x.m.Name, summary))
	maps.Copy(x.w.Header(), providerRetryHeaders(resp.Header))
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(e.status)
	_ = json.NewEncoder(x.w).Encode(gatewayapi.ErrorBody{Error: e.body})
	x.count("upstream_error", tokenUse{}, true)
}

// relayStream copies the provider's server-sent events to the client as they
// come, reading the usage the provider reports in its last chunk. The usage
// chunk is forwarded only when the client asked for it. A client that leaves
// does not stop the reading.
func (g *Gateway) relayStream(w http.ResponseWriter, resp *http.Response, clientUsage bool, k *keeper, model string,
	onData func([]byte), cut *error) (tokenUse, bool) {
	fl, _ := w.(http.Flusher)
	copyHeader(w, resp, "Content-Type")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	clientGone := false
	write := func(b []byte) {
		if clientGone {
			return
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return
		}
		// An event ends with a blank line: flush whole events.
		if fl != nil && len(bytes.TrimRight(b, "\r\n")) == 0 {
			fl.Flush()
		}
	}
	var tokens tokenUse
	reported, done := false, false
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
			payload, isData := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
			payload = bytes.TrimSpace(payload)
			skip := false
			if isData && bytes.Equal(payload, []byte("[DONE]")) {
				done = true
			} else if isData {
				onData(payload)
			}
			if isData && !done && bytes.Contains(payload, []byte(`"usage"`)) {
				var c struct {
					Choices []json.RawMessage `json:"choices"`
					Usage   *wireUsage        `json:"usage"`
				}
				if json.Unmarshal(payload, &c) == nil && c.Usage != nil {
					tokens, reported = c.Usage.charged()
					skip = !clientUsage && len(c.Choices) == 0
				}
			}
			if skip {
				// Drop the usage-only event, and the blank line that ends it.
				if next, _ := br.Peek(1); len(next) == 1 && next[0] == '\n' {
					_, _ = br.ReadByte()
				}
			} else {
				write(line)
			}
		}
		if err != nil {
			if fl != nil && !clientGone {
				fl.Flush()
			}
			if !done {
				k.providerFault("StreamCut", true, fmt.Sprintf("model %s: the stream ended before [DONE]: %v", model, err))
				*cut = fmt.Errorf("the provider's stream ended before [DONE]: %w", err)
			}
			return tokens, reported
		}
	}
}

// errLineTooLong ends a stream one of whose lines exceeds the bound.
var errLineTooLong = errors.New("line too long")

// readLine reads up to and including the next '\n', holding at most limit
// bytes: a longer line is errLineTooLong (and not returned).
func readLine(br *bufio.Reader, limit int64) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if int64(len(line)+len(frag)) > limit {
			return nil, errLineTooLong
		}
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func copyHeader(w http.ResponseWriter, resp *http.Response, names ...string) {
	for _, n := range names {
		if v := resp.Header.Get(n); v != "" {
			w.Header().Set(n, v)
		}
	}
}

// serveModel returns the model the policy serves for name — its degraded
// model while the attempt carries a Degrade directive — or a 404 naming the
// models the policy serves.
func serveModel(spec v1alpha1.RunAttemptSpec, name string) (v1alpha1.Model, *apiError) {
	models := spec.Policy.Models
	i := slices.IndexFunc(models, func(m v1alpha1.Model) bool { return m.Name == name })
	if i < 0 {
		names := make([]string, 0, len(models))
		for _, m := range models {
			names = append(names, m.Name)
		}
		e := newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeModelNotFound,
			fmt.Sprintf("model %q is not served to this run; RuntimePolicy %q serves %q", name, spec.Policy.Name, names))
		e.body.Param = "model"
		return v1alpha1.Model{}, e
	}
	m := models[i]
	degrade := slices.ContainsFunc(spec.Directives, func(d v1alpha1.Directive) bool { return d.Type == v1alpha1.DirectiveDegrade })
	if degrade && m.DegradedModel != "" {
		if j := slices.IndexFunc(models, func(x v1alpha1.Model) bool { return x.Name == m.DegradedModel }); j >= 0 {
			return models[j], nil
		}
	}
	return m, nil
}

// secretCache reads provider keys, keeping each for a minute (a rotated key
// is picked up within it).
type secretCache struct {
	c  client.Client
	mu sync.Mutex
	m  map[string]cachedKey
}

type cachedKey struct {
	value string
	read  time.Time
}

func (s *secretCache) key(ctx context.Context, ns string, ref *v1alpha1.SecretKeyRef) (string, error) {
	if ref == nil {
		return "", nil
	}
	id := ns + "/" + ref.Name + "/" + ref.Key
	s.mu.Lock()
	if c, ok := s.m[id]; ok && time.Since(c.read) < time.Minute {
		s.mu.Unlock()
		return c.value, nil
	}
	s.mu.Unlock()
	sec := &corev1.Secret{}
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, sec); err != nil {
		return "", fmt.Errorf("reading Secret %s/%s: %w", ns, ref.Name, err)
	}
	if sec.Labels[v1alpha1.LabelProviderKey] != strTrue {
		return "", fmt.Errorf("the Secret %s/%s is not marked as a provider key (label %s=true): "+
			"the gateway sends only keys a namespace admin marked for it", ns, ref.Name, v1alpha1.LabelProviderKey)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("the Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]cachedKey{}
	}
	s.m[id] = cachedKey{value: strings.TrimSpace(string(v)), read: time.Now()}
	return strings.TrimSpace(string(v)), nil
}
