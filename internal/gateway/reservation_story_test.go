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

package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
)

// claudeCodeTurn is a Claude Code-shaped Messages request: a long system
// prompt and 12 tools (about 60 KB, each turn), max_tokens 128000, the
// conversation so far with the cache marker on its last message, and the
// scripted answer's usage.
func claudeCodeTurn(turns int, tokens int64) []byte {
	tools := make([]map[string]any, 12)
	for i := range tools {
		tools[i] = map[string]any{"name": "Tool" + strconv.Itoa(i), "description": strings.Repeat("Use this tool well. ", 150),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string"}}}}
	}
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "fix the failing test"}}}}
	for i := range turns {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "toolu_" + strconv.Itoa(i),
				"name": "Tool1", "input": map[string]any{"arg": "go test ./..."}}}},
			map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "toolu_" + strconv.Itoa(i),
				"content": strings.Repeat("--- FAIL: TestX (0.00s) ", 80)}}})
	}
	last := msgs[len(msgs)-1]["content"].([]map[string]any)
	last[len(last)-1]["cache_control"] = map[string]string{"type": "ephemeral"}
	b, _ := json.Marshal(map[string]any{"model": gatewaytest.Model, "max_tokens": 128000, "stream": false,
		"system": []map[string]any{{"type": "text", "text": strings.Repeat("You are Claude Code. ", 1000),
			"cache_control": map[string]string{"type": "ephemeral"}}},
		"tools": tools, "messages": msgs,
		"agentrun_scripted": map[string]any{"say": "ok", "tokens": tokens}})
	return b
}

// A grant of 200,000 tokens serves a Claude Code session: its requests of
// max_tokens 128000 and 60 KB bodies are neither refused nor held to one
// at a time, because a request that extends the conversation of an
// answered one is bounded by that one's charge plus its new messages'
// bytes; the forwarded max_tokens is clamped to what remains, and the
// answer says so.
func TestAGrantOf200kServesAClaudeCodeSessionSideBySide(t *testing.T) {
	g := NewWithT(t)
	e, rec, _ := messagesEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Grant.Tokens = new(int64(200000))
		ra.Spec.Grant.ModelRequests = 10
	})
	first := claudeCodeTurn(0, 16000)
	g.Expect(len(first)).To(BeNumerically(">", 50000))
	resp := sendMessages(t, e, "/v1/messages", "x-api-key", first, nil)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	g.Expect(resp.Header.Get("agentrun-max-tokens-clamped")).To(BeEmpty(),
		"the first request's bound is its bytes, and 128000 still fits")

	// Two requests extending the first at once, on a slow provider: both
	// are admitted, the second with max_tokens clamped to what remains.
	rec.latency = 300 * time.Millisecond
	var wg sync.WaitGroup
	codes := make([]int, 2)
	clamped := make([]string, 2)
	for i := range 2 {
		wg.Go(func() {
			r := sendMessages(t, e, "/v1/messages", "x-api-key", claudeCodeTurn(1+i, 17000), nil)
			codes[i], clamped[i] = r.StatusCode, r.Header.Get("agentrun-max-tokens-clamped")
			_ = r.Body.Close()
		})
	}
	wg.Wait()
	g.Expect(codes).To(Equal([]int{http.StatusOK, http.StatusOK}), "neither refused: the bytes bound would have refused one")
	g.Expect(clamped).To(ContainElement(BeEmpty()), "one got its 128000")
	g.Expect(clamped).To(ContainElement(Not(BeEmpty())), "the other was clamped to what remained, and told so")
	var maxes []float64
	for _, b := range rec.bodies[1:] {
		maxes = append(maxes, b["max_tokens"].(float64))
	}
	g.Expect(maxes).To(ContainElement(BeNumerically("==", 128000)))
	g.Eventually(func() v1alpha1.Usage { return e.Status().Usage }).
		Should(Equal(v1alpha1.Usage{ModelRequests: 3, Tokens: 16000 + 2*17000}))
}
