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
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Every refusal of the Messages door answers in the Anthropic shape with
// the chat door's retry headers: final refusals x-should-retry: false, a
// refusal of the moment its Retry-After.
func TestAnthropicShapeKeepsTheRetryHeaders(t *testing.T) {
	g := NewWithT(t)
	for _, c := range []struct {
		e                     *apiError
		status                int
		typ, retry, retryAftr string
	}{
		{concurrencyRefusal(32, 32), http.StatusTooManyRequests, "rate_limit_error", "true", "1"},
		{errGrant(gatewayapi.CodeReserveExhausted, "reserve exhausted"), http.StatusTooManyRequests, "rate_limit_error", "false", ""},
		{errRunTerminated("ended"), http.StatusConflict, "invalid_request_error", "false", ""},
		{errNotPersisted("try again"), http.StatusServiceUnavailable, "overloaded_error", "", ""},
		{newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeModelNotFound, "no"), http.StatusNotFound,
			"not_found_error", "false", ""},
	} {
		rr := httptest.NewRecorder()
		anthropicShape(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeError(w, c.e) })).
			ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/v1/messages", nil))
		g.Expect(rr.Code).To(Equal(c.status), c.e.body.Code)
		g.Expect(rr.Header().Get(gatewayapi.HeaderShouldRetry)).To(Equal(c.retry), c.e.body.Code)
		g.Expect(rr.Header().Get("Retry-After")).To(Equal(c.retryAftr), c.e.body.Code)
		g.Expect(rr.Body.String()).To(MatchJSON(`{"type":"error","error":{"type":"` + c.typ + `","code":"` + c.e.body.Code +
			`","message":"` + c.e.body.Code + `: ` + c.e.body.Message + `"}}`))
	}
}
