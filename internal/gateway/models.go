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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrun-dev/agentrun/pkg/textutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
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
// byte to a token) plus its max_tokens, which the gateway lowers to fit — so
// no request can cross the grant; it settles on the reported usage.

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
	writeJSON(w, http.StatusOK, out)
}

// modelTicket is one admitted model request: what it reserved.
type modelTicket struct {
	reserved int64
}

// admitModel checks the phase and the grant, counts the request as
// dispatched and reserves its token bound. It returns the max_tokens to
// send (0: leave the request's own).
func (k *keeper) admitModel(promptBound, requested int64, capTokens *int64) (*modelTicket, int64, *apiError) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.stoppedLocked(); e != nil {
		return nil, 0, e
	}
	spec := k.obj.Spec
	gr, u := spec.Grant, k.facts.usage
	fin := isFinalizing(spec)
	if u.ModelRequests >= gr.ModelRequests {
		return nil, 0, grantRefusal(fin, fmt.Sprintf("%d/%d model requests", u.ModelRequests, gr.ModelRequests))
	}
	mt := requested
	if capTokens != nil && (mt <= 0 || mt > *capTokens) {
		mt = *capTokens
	}
	t := &modelTicket{}
	if gr.Tokens != nil {
		remaining := *gr.Tokens - u.Tokens - k.tokens
		room := remaining - promptBound
		if room < 1 {
			return nil, 0, grantRefusal(fin, fmt.Sprintf(
				"%d/%d tokens (%d reserved by requests under way; this request's prompt may use up to %d)",
				u.Tokens, *gr.Tokens, k.tokens, promptBound))
		}
		if mt <= 0 {
			mt = DefaultMaxTokens
		}
		mt = min(mt, room)
		t.reserved = promptBound + mt
		k.tokens += t.reserved
	}
	k.facts.usage.ModelRequests++
	k.markLocked(false)
	return t, mt, nil
}

// settle ends a model request: the reservation is released and the tokens
// the provider reported are charged, or — when it reported none (a cut
// stream, a timeout) — the reservation.
func (k *keeper) settle(t *modelTicket, tokens int64, reported bool) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tokens -= t.reserved
	charge := tokens
	if !reported {
		charge = t.reserved
	}
	if charge > 0 {
		k.facts.usage.Tokens += charge
		k.markLocked(false)
	}
	return charge
}

func (k *keeper) providerFault(kind string, retryable bool, msg string) {
	k.record(func() { k.facts.addFault(v1alpha1.FaultScopeProvider, kind, retryable, false, msg) })
}

// chatCompletions serves POST /v1/chat/completions.
func (g *Gateway) chatCompletions(w http.ResponseWriter, r *http.Request, k *keeper) {
	start := g.clock.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxModelBody+1))
	if err != nil {
		writeError(w, errInvalid("", "could not read the request body: "+err.Error()))
		return
	}
	if len(body) > maxModelBody {
		writeError(w, errInvalid("", fmt.Sprintf("the request body exceeds %d bytes", maxModelBody)))
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		writeError(w, errInvalid("", "the body must be a JSON object (a chat completion request)"))
		return
	}
	var name string
	if err := json.Unmarshal(fields["model"], &name); err != nil || name == "" {
		writeError(w, errInvalid("model", "model is required: a string naming one of the models the run's policy serves"))
		return
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(fields["messages"], &msgs); err != nil || len(msgs) == 0 {
		writeError(w, errInvalid("messages", "messages is required: a non-empty array"))
		return
	}
	var stream bool
	if raw, ok := fields["stream"]; ok && json.Unmarshal(raw, &stream) != nil {
		writeError(w, errInvalid("stream", "stream must be a boolean"))
		return
	}
	tokensField := "max_tokens"
	if _, ok := fields["max_completion_tokens"]; ok {
		tokensField = "max_completion_tokens"
	}
	var requested int64
	if raw, ok := fields[tokensField]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &requested) != nil || requested < 1 {
			writeError(w, errInvalid(tokensField, tokensField+" must be a positive integer"))
			return
		}
	}

	k.mu.Lock()
	spec := k.obj.Spec
	k.mu.Unlock()
	m, e := serveModel(spec, name)
	if e != nil {
		writeError(w, e)
		return
	}
	key, err := g.secrets.key(r.Context(), k.key.Namespace, m.APIKeySecretRef)
	if err != nil {
		g.log.Error(err, "Could not read a provider key", "runattempt", k.key, "model", m.Name)
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, "provider_key_unavailable",
			fmt.Sprintf("the gateway could not read the provider key of model %q: %v", m.Name, err)))
		return
	}
	labels := []string{k.key.Namespace, spec.Policy.Name, m.Name}

	ticket, mt, e := k.admitModel(int64(len(body)), requested, m.MaxTokens)
	if e != nil {
		k.refusal(e, "model/"+name)
		writeError(w, e)
		return
	}

	upstreamModel := m.UpstreamModel
	if upstreamModel == "" {
		upstreamModel = m.Name
	}
	fields["model"], _ = json.Marshal(upstreamModel)
	if mt > 0 {
		fields[tokensField], _ = json.Marshal(mt)
	}
	clientUsage := false
	if stream {
		var so map[string]json.RawMessage
		_ = json.Unmarshal(fields["stream_options"], &so)
		if so == nil {
			so = map[string]json.RawMessage{}
		}
		var iu bool
		_ = json.Unmarshal(so["include_usage"], &iu)
		clientUsage = iu
		so["include_usage"] = json.RawMessage("true")
		fields["stream_options"], _ = json.Marshal(so)
	}
	out, _ := json.Marshal(fields)

	// The upstream request outlives a client that leaves: the provider
	// charges it anyway, so the gateway reads on to count what it reports.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.opts.UpstreamTimeout)
	defer cancel()
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.BaseURL, "/")+"/chat/completions", bytes.NewReader(out))
	if err != nil {
		k.settle(ticket, 0, true)
		writeError(w, newError(http.StatusInternalServerError, gatewayapi.TypeServer, gatewayapi.CodeUpstreamUnavailable, err.Error()))
		return
	}
	ureq.Header.Set("Content-Type", "application/json")
	if stream {
		ureq.Header.Set("Accept", "text/event-stream")
	} else {
		ureq.Header.Set("Accept", "application/json")
	}
	if key != "" {
		ureq.Header.Set("Authorization", "Bearer "+key)
	}
	dispatched := g.clock.Now()
	resp, err := g.opts.Upstream.Do(ureq)
	if err != nil {
		charged := k.settle(ticket, 0, false)
		kind, status, code := "Unavailable", http.StatusBadGateway, gatewayapi.CodeUpstreamUnavailable
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			kind, status = "Timeout", http.StatusGatewayTimeout
		}
		k.providerFault(kind, true, fmt.Sprintf("model %s: %v", m.Name, err))
		g.metrics.modelRequests.WithLabelValues(append(labels, "error")...).Inc()
		g.metrics.tokens.WithLabelValues(labels...).Add(float64(charged))
		writeError(w, newError(status, gatewayapi.TypeServer, code,
			fmt.Sprintf("the provider of model %q could not be reached: %v (counted as a model request)", m.Name, err)))
		return
	}
	defer func() { _ = resp.Body.Close() }()

	var tokens int64
	var reported bool
	upstreamDone := dispatched
	switch {
	case resp.StatusCode != http.StatusOK:
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		upstreamDone = g.clock.Now()
		tokens, reported = 0, true // an error answer used no tokens
		kind, retryable := providerFaultOf(resp.StatusCode)
		var eb struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &eb) == nil {
			if c, ok := eb.Error.Code.(string); ok && gatewayapi.FaultKind(c) != "" {
				kind = gatewayapi.FaultKind(c)
			}
		}
		k.providerFault(kind, retryable, fmt.Sprintf("model %s: HTTP %d: %s", m.Name, resp.StatusCode, textutil.Truncate(string(raw), 200)))
		copyHeader(w, resp, "Content-Type", "Retry-After", "X-Should-Retry")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(raw)
		g.metrics.modelRequests.WithLabelValues(append(labels, "upstream_error")...).Inc()
	case !stream:
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		upstreamDone = g.clock.Now()
		var u struct {
			Usage *struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if rerr == nil && json.Unmarshal(raw, &u) == nil && u.Usage != nil {
			tokens, reported = u.Usage.TotalTokens, true
		}
		if rerr != nil {
			k.providerFault("ResponseCut", true, fmt.Sprintf("model %s: %v", m.Name, rerr))
		}
		copyHeader(w, resp, "Content-Type")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(raw)
		g.metrics.modelRequests.WithLabelValues(append(labels, "ok")...).Inc()
	default:
		tokens, reported = g.relayStream(w, resp, clientUsage, k, m.Name)
		upstreamDone = g.clock.Now()
		outcome := "ok"
		if !reported {
			outcome = "stream_cut"
		}
		g.metrics.modelRequests.WithLabelValues(append(labels, outcome)...).Inc()
	}
	charged := k.settle(ticket, tokens, reported)
	g.metrics.tokens.WithLabelValues(labels...).Add(float64(charged))
	upstream := upstreamDone.Sub(dispatched)
	g.metrics.upstreamSeconds.WithLabelValues(m.Name).Observe(upstream.Seconds())
	g.metrics.addedSeconds.Observe(max(g.clock.Since(start)-upstream, 0).Seconds())
}

// relayStream copies the provider's server-sent events to the client as they
// come, reading the usage the provider reports in its last chunk. The usage
// chunk is forwarded only when the client asked for it. A client that leaves
// does not stop the reading.
func (g *Gateway) relayStream(w http.ResponseWriter, resp *http.Response, clientUsage bool, k *keeper, model string) (int64, bool) {
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
	var tokens int64
	reported, done := false, false
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			payload, isData := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
			payload = bytes.TrimSpace(payload)
			skip := false
			if isData && bytes.Equal(payload, []byte("[DONE]")) {
				done = true
			} else if isData && bytes.Contains(payload, []byte(`"usage"`)) {
				var c struct {
					Choices []json.RawMessage `json:"choices"`
					Usage   *struct {
						TotalTokens int64 `json:"total_tokens"`
					} `json:"usage"`
				}
				if json.Unmarshal(payload, &c) == nil && c.Usage != nil {
					tokens, reported = c.Usage.TotalTokens, true
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
			}
			return tokens, reported
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

// providerFaultOf is the fault kind of an upstream HTTP error and whether a
// retry may succeed.
func providerFaultOf(status int) (string, bool) {
	switch {
	case status == http.StatusTooManyRequests:
		return "RateLimited", true
	case status == http.StatusRequestTimeout:
		return "Timeout", true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "Unauthorized", false
	case status == http.StatusNotFound:
		return "NotFound", false
	case status >= 500:
		return "ServerError", true
	}
	return "InvalidRequest", false
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
		return "", fmt.Errorf("Secret %s/%s: %w", ns, ref.Name, err)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]cachedKey{}
	}
	s.m[id] = cachedKey{value: strings.TrimSpace(string(v)), read: time.Now()}
	return strings.TrimSpace(string(v)), nil
}
