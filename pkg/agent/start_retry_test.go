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

// TestStartAsksAgainWhileTheGatewayCannotReachTheAPIServer: a gateway that
// answers not_persisted (it could not check the token with the API server,
// e.g. while kube-apiserver restarts) is asked again, not taken as the end
// of the attempt; another refusal ends Start at once.
func TestStartAsksAgainWhileTheGatewayCannotReachTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		status, code := http.StatusServiceUnavailable, gatewayapi.CodeNotPersisted
		if n > 2 {
			status, code = http.StatusForbidden, gatewayapi.CodePermissionDenied
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(gatewayapi.ErrorBody{Error: gatewayapi.Error{Type: "server", Code: code, Message: "test"}})
	}))
	defer srv.Close()

	a, err := agent.New(agent.Config{GatewayURL: srv.URL, Token: "t"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(context.Background())
	var ge *agent.GatewayError
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	g.Expect(ge.Code).To(Equal(gatewayapi.CodePermissionDenied))
	g.Expect(calls.Load()).To(BeEquivalentTo(3), "two not_persisted answers asked again, the refusal ended Start")
}

// TestStartAsksAgainWhenTheGatewayClosesTheConnection: a gateway killed
// mid-request (its restart) closes the connection without an answer; the
// first read of the attempt is asked again instead of ending the agent,
// which would cost the run an attempt.
func TestStartAsksAgainWhenTheGatewayClosesTheConnection(t *testing.T) {
	g := NewWithT(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close() // no answer: EOF at the client
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(gatewayapi.ErrorBody{Error: gatewayapi.Error{Type: "permission", Code: gatewayapi.CodePermissionDenied, Message: "test"}})
	}))
	defer srv.Close()

	a, err := agent.New(agent.Config{GatewayURL: srv.URL, Token: "t"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(context.Background())
	var ge *agent.GatewayError
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	g.Expect(ge.Code).To(Equal(gatewayapi.CodePermissionDenied))
	g.Expect(calls.Load()).To(BeEquivalentTo(3), "two cut-off reads asked again, the answer ended Start")
}

// TestStartCountsEachWaitOnItsOwn: answers of a gateway that cannot reach
// the API server do not use up Start's waits for the operator to record the
// pod on its RunAttempt — an API server restart delays both, and an agent
// that gave up then cost its run an attempt (chaos: apiserver-restart).
func TestStartCountsEachWaitOnItsOwn(t *testing.T) {
	g := NewWithT(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		status, code := http.StatusServiceUnavailable, gatewayapi.CodeNotPersisted
		switch {
		case n > 7:
			status, code = http.StatusForbidden, gatewayapi.CodePermissionDenied
		case n > 5:
			status, code = http.StatusForbidden, gatewayapi.CodeNotAnAttempt
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(gatewayapi.ErrorBody{Error: gatewayapi.Error{Type: "server", Code: code, Message: "test"}})
	}))
	defer srv.Close()

	a, err := agent.New(agent.Config{GatewayURL: srv.URL, Token: "t"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(context.Background())
	var ge *agent.GatewayError
	g.Expect(errors.As(err, &ge)).To(BeTrue(), "%v", err)
	g.Expect(ge.Code).To(Equal(gatewayapi.CodePermissionDenied), "five not_persisted and two not_an_attempt answers asked again")
	g.Expect(calls.Load()).To(BeEquivalentTo(8))
}
