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

package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// The reservation's tightness on agents' sessions: a Claude Code-shaped and
// a Codex-shaped session (testdata/, synthesised from their recorded
// request shapes by testdata/synth_sessions.py) are replayed turn by turn
// through an in-process gateway, to a provider that speaks the agent's API
// and to a chat provider (translated), each turn answered with the usage
// the session records. The gateway's own counters say what it reserved
// (agentrun_gateway_reserved_tokens_total, by part) and charged
// (agentrun_gateway_tokens_total).

var (
	//go:embed testdata/claude-code-session.json
	claudeSession []byte
	//go:embed testdata/codex-session.json
	codexSession []byte
)

// session is a recorded agent session: the fields every request repeats,
// and each turn's new messages (input items) and reported usage.
type session struct {
	Door  string         `json:"door"`
	Shape string         `json:"shape"`
	Base  map[string]any `json:"base"`
	Turns []struct {
		Append []map[string]any `json:"append"`
		Usage  struct {
			InputTokens         int64 `json:"input_tokens"`
			CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
			CacheReadTokens     int64 `json:"cache_read_input_tokens"`
			OutputTokens        int64 `json:"output_tokens"`
		} `json:"usage"`
	} `json:"turns"`
}

// reservationRow is one session replayed to one provider API.
type reservationRow struct {
	Session  string `json:"session"`
	Provider string `json:"provider"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	// BodyBytes is the sum of the bodies' bytes: the prompt bound without
	// the extension rule.
	BodyBytes      int64   `json:"bodyBytes"`
	ReservedPrompt int64   `json:"reservedPrompt"`
	ChargedPrompt  int64   `json:"chargedPrompt"`
	Reserved       int64   `json:"reserved"`
	Charged        int64   `json:"charged"`
	PromptRatio    float64 `json:"promptRatio"`
	BytesRatio     float64 `json:"bytesPromptRatio"`
	Ratio          float64 `json:"ratio"`
}

func driveReservation() ([]reservationRow, error) {
	var rows []reservationRow
	for _, c := range []struct {
		raw      []byte
		provider v1alpha1.ModelAPI
	}{
		{claudeSession, v1alpha1.ModelAPIAnthropicMessages}, {claudeSession, v1alpha1.ModelAPIOpenAIChat},
		{codexSession, v1alpha1.ModelAPIOpenAIResponses}, {codexSession, v1alpha1.ModelAPIOpenAIChat},
	} {
		var s session
		if err := json.Unmarshal(c.raw, &s); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "==> reservation: %s to an %s provider\n", s.Shape, c.provider)
		row, err := replay(&s, c.provider)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// replay sends the session's turns, in order, through a fresh gateway.
func replay(s *session, provider v1alpha1.ModelAPI) (reservationRow, error) {
	row := reservationRow{Session: s.Shape, Provider: string(provider)}
	up := &upstream.Server{}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row, err
	}
	defer func() { _ = uln.Close() }()
	go func() { _ = http.Serve(uln, up) }()
	ra := gatewaytest.Attempt()
	ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 1000, ToolCalls: 10, Tokens: new(int64(1 << 40))}
	ra.Spec.Policy.Models = []v1alpha1.Model{{Name: gatewaytest.Model, BaseURL: "http://" + uln.Addr().String() + "/v1", API: provider}}
	ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Hour}
	c := fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).WithObjects(ra).WithStatusSubresource(&v1alpha1.RunAttempt{}).Build()
	reg := prometheus.NewRegistry()
	g, err := gateway.New(gateway.Options{Client: c, Registry: reg, Authenticator: gateway.StaticTokens{tokenLoad: gateway.Identity{
		Username: "system:serviceaccount:team:agentrun-runner", Namespace: ra.Namespace, PodName: ra.Spec.PodName, PodUID: ra.Spec.PodUID}}})
	if err != nil {
		return row, err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row, err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(gln) }()
	defer func() { _ = srv.Close() }()

	path, list := "/v1/messages", "messages"
	if s.Door == "responses" {
		path, list = "/v1/responses", "input"
	}
	limit := int64(gateway.DefaultMaxTokens)
	if n, ok := s.Base["max_tokens"].(float64); ok {
		limit = int64(n)
	}
	var conv []map[string]any
	for _, t := range s.Turns {
		conv = append(conv, t.Append...)
		u := t.Usage
		prompt := u.InputTokens + u.CacheCreationTokens + u.CacheReadTokens
		// The scripted provider reports Tokens as half prompt, half
		// completion, the completion at most the cap sent (Messages: cache
		// tokens on top): Tokens is chosen so the total is the session's.
		turn := upstream.Turn{Say: "ok", Tokens: prompt + u.OutputTokens}
		if total := prompt + u.OutputTokens; total > 2*limit {
			turn.Tokens = 2 * (total - limit)
		}
		if provider == v1alpha1.ModelAPIAnthropicMessages {
			turn = upstream.Turn{Say: "ok", Tokens: 2 * u.OutputTokens, CacheWriteTokens: u.CacheCreationTokens,
				CacheReadTokens: prompt - u.OutputTokens - u.CacheCreationTokens}
		}
		body := maps.Clone(s.Base)
		body["model"], body[list], body[upstream.ScriptField] = gatewaytest.Model, withCacheMarker(conv, s.Door), turn
		raw, _ := json.Marshal(body)
		row.Requests++
		row.BodyBytes += int64(len(raw))
		row.ChargedPrompt += prompt
		req, _ := http.NewRequest(http.MethodPost, "http://"+gln.Addr().String()+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+tokenLoad)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return row, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			row.Failed++
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return row, err
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := int64(m.GetCounter().GetValue())
			switch mf.GetName() {
			case "agentrun_gateway_tokens_total":
				row.Charged += v
			case "agentrun_gateway_reserved_tokens_total":
				row.Reserved += v
				for _, l := range m.GetLabel() {
					if l.GetName() == "part" && l.GetValue() == "prompt" {
						row.ReservedPrompt += v
					}
				}
			}
		}
	}
	if row.ChargedPrompt > 0 && row.Charged > 0 {
		row.PromptRatio = float64(row.ReservedPrompt) / float64(row.ChargedPrompt)
		row.BytesRatio = float64(row.BodyBytes) / float64(row.ChargedPrompt)
		row.Ratio = float64(row.Reserved) / float64(row.Charged)
	}
	return row, nil
}

// withCacheMarker is the conversation as Claude Code sends it: the cache
// marker on the last message's last block (it moves every turn).
func withCacheMarker(conv []map[string]any, door string) []map[string]any {
	out := append([]map[string]any(nil), conv...)
	if door != "messages" || len(out) == 0 {
		return out
	}
	last := maps.Clone(out[len(out)-1])
	blocks, _ := last["content"].([]any)
	if len(blocks) > 0 {
		blocks = append([]any(nil), blocks...)
		b, _ := blocks[len(blocks)-1].(map[string]any)
		b = maps.Clone(b)
		b["cache_control"] = map[string]string{"type": "ephemeral"}
		blocks[len(blocks)-1] = b
		last["content"] = blocks
	}
	out[len(out)-1] = last
	return out
}

func writeReservation(b *strings.Builder, rows []reservationRow) {
	fmt.Fprintf(b, "## The reservation on agents' sessions\n\n")
	fmt.Fprintf(b, "Two 30-turn sessions, synthesised from the request shapes recorded for Claude Code 2.1.328 (Messages, "+
		"a growing history, `max_tokens: 128000`, 12 tools) and Codex 0.169.0 (Responses, a growing input with each turn's "+
		"reasoning item, 10 tools, no `max_output_tokens`), are replayed turn by turn through an in-process gateway "+
		"(test/bench/gateway/testdata; each turn answered with the usage the session records, at 4 bytes of prompt per "+
		"token). *Reserved* and *charged* are the gateway's own counters (`agentrun_gateway_reserved_tokens_total`, "+
		"`agentrun_gateway_tokens_total`). The prompt's bound is what the rule tightens: a request that extends an answered "+
		"one is bounded by that one's charge plus its new messages' bytes. The completion part is the cap each request "+
		"asks (Claude Code: 128000 every turn; Codex: none, so the gateway's default %d), which the provider may use "+
		"in full and the gateway therefore holds.\n\n", gateway.DefaultMaxTokens)
	fmt.Fprintf(b, "| session | provider | requests | failed | prompt bound by bytes alone / charged prompt | **reserved prompt / charged prompt** | reserved / charged (with the completion caps) |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %d | %d | %.2f | **%.2f** | %.2f |\n", r.Session, r.Provider, r.Requests, r.Failed,
			r.BytesRatio, r.PromptRatio, r.Ratio)
	}
	fmt.Fprintf(b, "\nTarget: reserved prompt / charged prompt ≤ 1.3.\n\n")
}
