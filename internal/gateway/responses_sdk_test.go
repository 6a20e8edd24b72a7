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
	"context"
	"errors"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// The official OpenAI Go SDK's Responses client, unmodified, reads the
// translated answer, the translated event stream and the refusals.
func TestResponsesDoorServesTheOpenAISDKThroughAChatProvider(t *testing.T) {
	g := NewWithT(t)
	e, _ := modelEnv(t, func(ra *v1alpha1.RunAttempt) { ra.Spec.Grant.ModelRequests = 2 })
	c := openai.NewClient(option.WithBaseURL(e.URL()+"/v1"), option.WithAPIKey(gatewaytest.Token), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "scripted", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")}}
	turn := upstream.Turn{Say: "Looking.", Tools: []upstream.ToolCall{{ID: "call_9", Name: "weather",
		Arguments: map[string]any{"city": "Oslo"}}}, Tokens: 20, CachedTokens: 6}

	r, err := c.Responses.New(ctx, params, option.WithJSONSet(upstream.ScriptField, turn))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.OutputText()).To(Equal("Looking."))
	g.Expect(r.Output).To(HaveLen(2))
	g.Expect(r.Output[1].AsFunctionCall()).To(And(HaveField("CallID", "call_9"), HaveField("Arguments", `{"city":"Oslo"}`)))
	g.Expect(r.Usage.TotalTokens).To(BeEquivalentTo(20))
	g.Expect(r.Usage.InputTokensDetails.CachedTokens).To(BeEquivalentTo(6))

	s := c.Responses.NewStreaming(ctx, params, option.WithJSONSet(upstream.ScriptField, turn))
	var text string
	var done *responses.Response
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			done = &ev.Response
		}
	}
	g.Expect(s.Err()).NotTo(HaveOccurred())
	g.Expect(text).To(Equal("Looking."))
	g.Expect(done).NotTo(BeNil())
	g.Expect(done.Usage.TotalTokens).To(BeEquivalentTo(20))
	g.Expect(done.Output[1].AsFunctionCall().Name).To(Equal("weather"))

	_, err = c.Responses.New(ctx, params)
	var apiErr *openai.Error
	g.Expect(errors.As(err, &apiErr)).To(BeTrue())
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(apiErr.Code).To(Equal(gatewayapi.CodeGrantExhausted), "the SDK surfaces the refusal's code")

	p := params
	p.PreviousResponseID = openai.String("resp_1")
	_, err = c.Responses.New(ctx, p)
	g.Expect(errors.As(err, &apiErr)).To(BeTrue())
	g.Expect(apiErr.StatusCode).To(Equal(http.StatusBadRequest))
	g.Expect(apiErr.Param).To(Equal("previous_response_id"))
}
