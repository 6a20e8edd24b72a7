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

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// fakeGateway answers the n-th request (from 1) as answer says: an HTTP
// status and an error code, or 0 to close the connection without an answer
// (a gateway killed mid-request). calls counts the requests.
func fakeGateway(t *testing.T, answer func(n int32) (int, string)) (url string, calls *atomic.Int32) {
	calls = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, code := answer(calls.Add(1))
		if status == 0 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				_ = conn.Close() // no answer: EOF at the client
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(gatewayapi.ErrorBody{Error: gatewayapi.Error{Type: "server", Code: code, Message: "test"}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// startCode starts an agent on url and returns the code of the gateway
// error Start ended with.
func startCode(t *testing.T, url string) string {
	g := NewWithT(t)
	a, err := agent.New(agent.Config{GatewayURL: url, Token: "t"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(context.Background())
	var ge *agent.GatewayError
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	return ge.Code
}

// TestStartAsksAgainWhileTheGatewayCannotReachTheAPIServer: a gateway that
// answers not_persisted (it could not check the token with the API server,
// e.g. while kube-apiserver restarts) is asked again, not taken as the end
// of the attempt; another refusal ends Start at once.
func TestStartAsksAgainWhileTheGatewayCannotReachTheAPIServer(t *testing.T) {
	url, calls := fakeGateway(t, func(n int32) (int, string) {
		if n > 2 {
			return http.StatusForbidden, gatewayapi.CodePermissionDenied
		}
		return http.StatusServiceUnavailable, gatewayapi.CodeNotPersisted
	})
	g := NewWithT(t)
	g.Expect(startCode(t, url)).To(Equal(gatewayapi.CodePermissionDenied))
	g.Expect(calls.Load()).To(BeEquivalentTo(3), "two not_persisted answers asked again, the refusal ended Start")
}

// TestStartAsksAgainWhenTheGatewayClosesTheConnection: a gateway killed
// mid-request (its restart) closes the connection without an answer; the
// first read of the attempt is asked again instead of ending the agent,
// which would cost the run an attempt.
func TestStartAsksAgainWhenTheGatewayClosesTheConnection(t *testing.T) {
	url, calls := fakeGateway(t, func(n int32) (int, string) {
		if n <= 2 {
			return 0, ""
		}
		return http.StatusForbidden, gatewayapi.CodePermissionDenied
	})
	g := NewWithT(t)
	g.Expect(startCode(t, url)).To(Equal(gatewayapi.CodePermissionDenied))
	g.Expect(calls.Load()).To(BeEquivalentTo(3), "two cut-off reads asked again, the answer ended Start")
}

// TestStartCountsEachWaitOnItsOwn: answers of a gateway that cannot reach
// the API server do not use up Start's waits for the operator to record the
// pod on its RunAttempt — an API server restart delays both, and an agent
// that gave up then cost its run an attempt (chaos: apiserver-restart).
func TestStartCountsEachWaitOnItsOwn(t *testing.T) {
	url, calls := fakeGateway(t, func(n int32) (int, string) {
		switch {
		case n > 7:
			return http.StatusForbidden, gatewayapi.CodePermissionDenied
		case n > 5:
			return http.StatusForbidden, gatewayapi.CodeNotAnAttempt
		}
		return http.StatusServiceUnavailable, gatewayapi.CodeNotPersisted
	})
	g := NewWithT(t)
	g.Expect(startCode(t, url)).To(Equal(gatewayapi.CodePermissionDenied), "five not_persisted and two not_an_attempt answers asked again")
	g.Expect(calls.Load()).To(BeEquivalentTo(8))
}
