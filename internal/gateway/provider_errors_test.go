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
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// providerKey is the key modelEnv's Secret holds for the default model.
const providerKey = "sk-provider-secret"

// A hostile provider's error answer reaches the agent as the door's own
// error: the status kept, a short sanitized message, never the raw bytes
// (which may be huge, hold escapes, or echo the provider key), and only the
// well-formed retry hints among its headers. It still counts as a model
// request and a Provider fault, whose message is sanitized too.
func TestModelDoorRelaysABoundedSanitizedProviderError(t *testing.T) {
	echo := "Invalid key: Authorization: Bearer " + providerKey + " \x1b[31mretry\u202e now\x00 " +
		strings.Repeat("padding ", 200) + providerKey
	for name, tc := range map[string]struct {
		status      int
		header      http.Header
		body        string
		wantStatus  int
		wantType    string
		wantCode    string
		wantMessage string
		wantHeader  http.Header
		wantFault   string
	}{
		"a JSON error echoing the key": {
			status: http.StatusTooManyRequests,
			header: http.Header{"Retry-After": {"7"}, "X-Should-Retry": {"true"}, "X-Echo": {providerKey},
				"Set-Cookie": {"session=" + providerKey}},
			body:       `{"error":{"message":` + quote(echo) + `,"code":"rate_limit_exceeded","key":"` + providerKey + `"}}`,
			wantStatus: http.StatusTooManyRequests, wantType: gatewayapi.TypeRateLimit, wantCode: "rate_limit_exceeded",
			wantMessage: `the provider of model "scripted" answered HTTP 429: Invalid key: Authorization: Bearer [redacted] [31mretry now padding`,
			wantHeader:  http.Header{"Retry-After": {"7"}, "X-Should-Retry": {"true"}},
			wantFault:   "RateLimitExceeded",
		},
		"megabytes of HTML": {
			status: http.StatusBadGateway, header: http.Header{"Retry-After": {"soon; " + providerKey}},
			body:       "<html>" + strings.Repeat(providerKey+" ", 1<<20/len(providerKey)*8) + "</html>",
			wantStatus: http.StatusBadGateway, wantType: gatewayapi.TypeServer,
			wantMessage: `the provider of model "scripted" answered HTTP 502 with no JSON error message (counted as a model request)`,
			wantHeader:  http.Header{},
			wantFault:   "ServerError",
		},
		"a code that is no identifier, and a status that is no error": {
			status: http.StatusAccepted, body: `{"error":{"message":"fine","code":"<script>` + providerKey + `"}}`,
			wantStatus: http.StatusBadGateway, wantType: gatewayapi.TypeServer,
			wantMessage: `the provider of model "scripted" answered HTTP 502: fine (counted as a model request)`,
			wantHeader:  http.Header{},
			wantFault:   "ServerError",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			e, rec := modelEnv(t, nil)
			rec.inner = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				maps.Copy(w.Header(), tc.header)
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token, chat("scripted", ""))
			defer func() { _ = resp.Body.Close() }()
			raw, err := io.ReadAll(resp.Body)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.StatusCode).To(Equal(tc.wantStatus))
			g.Expect(string(raw)).NotTo(ContainSubstring(providerKey))
			g.Expect(len(raw)).To(BeNumerically("<", gateway.MaxProviderErrorMessage+512), "the answer is bounded")
			g.Expect(resp.Header.Get("Content-Type")).To(Equal("application/json"))
			for _, h := range []string{"Retry-After", "X-Should-Retry", "X-Echo", "Set-Cookie"} {
				g.Expect(resp.Header.Get(h)).To(Equal(tc.wantHeader.Get(h)), h)
			}
			var eb gatewayapi.ErrorBody
			g.Expect(json.Unmarshal(raw, &eb)).To(Succeed(), "the door's own error shape: %s", raw)
			g.Expect(eb.Error.Type).To(Equal(tc.wantType))
			g.Expect(eb.Error.Code).To(Equal(tc.wantCode))
			g.Expect(eb.Error.Message).To(HavePrefix(strings.TrimSuffix(tc.wantMessage, " padding")))
			g.Expect(eb.Error.Message).NotTo(ContainSubstring("\x1b"))
			g.Expect(eb.Error.Message).NotTo(ContainSubstring("\u202e"))
			g.Expect(eb.Error.Message).NotTo(ContainSubstring("\x00"))

			g.Eventually(func() v1alpha1.RunAttemptStatus { return e.Status() }).Should(And(
				HaveField("Usage.ModelRequests", BeEquivalentTo(1)),
				HaveField("Faults", ContainElement(And(HaveField("Scope", v1alpha1.FaultScopeProvider),
					HaveField("Kind", tc.wantFault), HaveField("LastMessage", Not(ContainSubstring(providerKey)))))),
			), "a failed call still counts, as a Provider fault")
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
