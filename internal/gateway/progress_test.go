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
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// steps reads the attempt's step counters as the gateway holds them.
func steps(t *testing.T, e *gatewaytest.Env) (int64, int64) {
	t.Helper()
	var v gatewayapi.Attempt
	as(t, e, http.MethodGet, self(""), nil).into(t, &v)
	return v.Steps, v.LastProgressStep
}

// A step is a model turn the gateway served, and progress is what it sees:
// an agent that never calls POST /self/steps has its steps counted, an
// answer that repeats a recent one is no progress, and a claim of progress
// is ignored (issue 30, item 1).
func TestStepsAndProgressAreWhatTheGatewaySees(t *testing.T) {
	g := NewWithT(t)
	e := gatewaytest.Start(t, gatewaytest.Options{})
	chat := func(turn upstream.Turn, stream bool) {
		t.Helper()
		body := chatTurn(turn)
		body["stream"] = stream
		r := as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", body)
		g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	}

	chat(upstream.Turn{Say: "Looking at the sources.", Tokens: 10}, false)
	s, p := steps(t, e)
	g.Expect(s).To(Equal(int64(1)), "a model turn served is a step, reported or not")
	g.Expect(p).To(Equal(int64(1)), "a first answer is progress")

	// The same answer again and again, streamed or not: steps, no progress.
	for range 3 {
		chat(upstream.Turn{Say: "Let me think about this some more.", Tokens: 10}, false)
	}
	chat(upstream.Turn{Say: "Let me think about this some more.", Tokens: 10}, true)
	s, p = steps(t, e)
	g.Expect(s).To(Equal(int64(5)))
	g.Expect(p).To(Equal(int64(2)), "only the first of the repeated answers is progress")

	// The agent claims progress: its first report is the turn already
	// counted, a second one a step of its own — and neither is progress.
	g.Expect(as(t, e, http.MethodPost, self("/steps"), `{"progress":true}`).status).To(Equal(http.StatusOK))
	s, _ = steps(t, e)
	g.Expect(s).To(Equal(int64(5)), "a report of the turn just served does not count it twice")
	g.Expect(as(t, e, http.MethodPost, self("/steps"), `{"progress":true}`).status).To(Equal(http.StatusOK))
	s, p = steps(t, e)
	g.Expect(s).To(Equal(int64(6)), "a reported step beyond the model turns adds one")
	g.Expect(p).To(Equal(int64(2)), "a claim of progress is not evidence")

	// A tool call never made before is progress; the same call again is not.
	chat(upstream.Turn{Tools: []upstream.ToolCall{{ID: "c1", Name: "notes.write", Arguments: map[string]any{"text": "a"}}}}, false)
	admit(t, e, "notes.write", map[string]any{"text": "a"})
	s, p = steps(t, e)
	g.Expect(s).To(Equal(int64(6)), "the agent's extra step already covered this turn")
	g.Expect(p).To(Equal(int64(6)))
	// The same tool call answered again, under another call id.
	chat(upstream.Turn{Tools: []upstream.ToolCall{{ID: "c2", Name: "notes.write", Arguments: map[string]any{"text": "a"}}}}, true)
	admit(t, e, "notes.write", map[string]any{"text": "a"})
	s, p = steps(t, e)
	g.Expect(s).To(Equal(int64(7)))
	g.Expect(p).To(Equal(int64(6)), "an answer repeating a tool call, under a new id, and the call again are no progress")

	// A reported step per model turn does not count the turn twice.
	chat(upstream.Turn{Say: "Something new.", Tokens: 10}, false)
	g.Expect(as(t, e, http.MethodPost, self("/steps"), `{"progress":false}`).status).To(Equal(http.StatusOK))
	s, p = steps(t, e)
	g.Expect(s).To(Equal(int64(8)))
	g.Expect(p).To(Equal(int64(8)))
}
