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
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Degrade withholds the tools the policy marks degradable, at the tool door
// and on the agent API; nothing else changes, and the directive's end
// serves them again (issue 30, item 3).
func TestDegradeWithholdsDegradableToolsAtTheDoors(t *testing.T) {
	g := NewWithT(t)
	e, u := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		for i := range ra.Spec.Policy.Tools {
			switch ra.Spec.Policy.Tools[i].Name {
			case "search", "http.get", "report.publish":
				ra.Spec.Policy.Tools[i].Degradable = true
			}
		}
	})
	cs := connectDoor(t, e, gatewaytest.Token)
	g.Expect(listed(t, cs)).To(ContainElement("search"))

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveDegrade, Gate: v1alpha1.GateBudget, Message: "80% of the budget used"}}
	})
	g.Expect(listed(t, cs)).To(Equal([]string{"notes.write", "report.publish", "ticket.create", "ticket.upsert"}),
		"search is withheld; the output tool never is")
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(resultText(res)).To(And(ContainSubstring(gatewayapi.CodeToolDegraded), ContainSubstring("Degrade"),
		ContainSubstring("80% of the budget used"), ContainSubstring(`"search"`)))
	g.Expect(u.count("search")).To(BeZero(), "a withheld tool is not dispatched")

	r := e.Do("POST", gatewayapi.PathPrefix+"/self/toolcalls", gatewaytest.Token, []byte(`{"tool":"http.get","arguments":{"url":"u"}}`))
	g.Expect(r.StatusCode).To(Equal(http.StatusForbidden), "the agent API withholds it too")
	_ = r.Body.Close()
	g.Expect(e.Status().Usage.ToolCalls).To(BeZero())

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) { s.Directives = nil })
	g.Expect(listed(t, cs)).To(ContainElement("search"), "served again once the directive is gone")
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": "x"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), resultText(res))
}

// Compress applies the policy's compression: a model request generates at
// most compression.maxTokens, and a tool result is trimmed to
// compression.maxToolResultBytes, saying so.
func TestCompressAppliesThePolicysCompressionAtTheDoors(t *testing.T) {
	g := NewWithT(t)
	e, rec := modelEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Compression = &v1alpha1.Compression{MaxTokens: new(int64(64))}
	})
	resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", `,"max_tokens":1000`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ := rec.last()
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 1000)), "no directive: the request's own")

	e.UpdateSpec(func(s *v1alpha1.RunAttemptSpec) {
		s.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveCompress, Gate: v1alpha1.GateSteps}}
	})
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", `,"max_tokens":1000`))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ = rec.last()
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 64)), "Compress caps what one request may generate")
	resp = e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	_ = resp.Body.Close()
	sent, _ = rec.last()
	g.Expect(sent).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 64)), "and sets the cap when the request asks none")

	d, _ := doorEnv(t, func(ra *v1alpha1.RunAttempt) {
		ra.Spec.Policy.Compression = &v1alpha1.Compression{MaxToolResultBytes: new(int64(300))}
		ra.Spec.Directives = []v1alpha1.Directive{{Type: v1alpha1.DirectiveCompress, Gate: v1alpha1.GateBudget}}
	})
	cs := connectDoor(t, d, gatewaytest.Token)
	long := strings.Repeat("vector databases ", 100)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"q": long}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse())
	txt := resultText(res)
	g.Expect(txt).To(ContainSubstring("trimmed to 300 of"))
	g.Expect(len(txt)).To(BeNumerically("<", 300+120), "the result is cut to the bound, plus the note")
	g.Expect(res.StructuredContent).To(BeNil())
}
