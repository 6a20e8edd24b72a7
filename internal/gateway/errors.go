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
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// apiError is an answer the gateway refuses with: an HTTP status and an
// OpenAI-shaped body with a stable code.
type apiError struct {
	status int
	body   gatewayapi.Error
	// fault, when set, is the fault kind the refusal is counted under in
	// the attempt's facts (scope Agent).
	fault string
	// onCounts marks a refusal decided on the attempt's counts (the grant):
	// it is answered only once those counts are durable (durableRefusal).
	onCounts bool
	// retryAfter, when set, says when to ask again (Retry-After): the
	// refusal is of the moment, not of the request, so clients retry it.
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.body.Code + ": " + e.body.Message }

func newError(status int, typ, code, msg string) *apiError {
	return &apiError{status: status, body: gatewayapi.Error{Type: typ, Code: code, Message: msg}}
}

func errInvalid(param, msg string) *apiError {
	e := newError(http.StatusBadRequest, gatewayapi.TypeInvalidRequest, gatewayapi.CodeInvalidRequest, msg)
	e.body.Param = param
	return e
}

func errGrant(code, msg string) *apiError {
	e := newError(http.StatusTooManyRequests, gatewayapi.TypeRateLimit, code, msg)
	switch code {
	case gatewayapi.CodeFinalizeOnly:
		e.fault = "FinalizeOnly"
	default:
		e.fault = "GrantExhausted"
	}
	return e
}

func errRunTerminated(msg string) *apiError {
	return newError(http.StatusConflict, gatewayapi.TypeConflict, gatewayapi.CodeRunTerminated, msg)
}

func errSuperseded(msg string) *apiError {
	return newError(http.StatusConflict, gatewayapi.TypeConflict, gatewayapi.CodeAttemptSuperseded, msg)
}

// errInterceptor answers a refusal of the policy's chain. A fail-closed
// interceptor that failed before the call because what it checks with is
// unreachable for now (chain.ErrUnavailable: auth's TokenReview while the
// API server is away) refused it for now: nothing was dispatched and asking
// again may succeed, so the answer is 503 interceptor_unavailable, which
// the Go SDK asks again (and the OpenAI clients retry, for a model
// request). A veto, any other failure, or one after the call ran is a
// refusal (403 interceptor_refused).
func errInterceptor(ref *chain.Refusal) *apiError {
	if !ref.Veto && !ref.Dispatched && errors.Is(ref.Err, chain.ErrUnavailable) {
		e := newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeInterceptorUnavailable,
			ref.Error()+"; nothing was dispatched, ask again")
		e.fault = "InterceptorFailed"
		return e
	}
	e := newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeInterceptorRefused, ref.Error())
	e.fault = "InterceptorRefused"
	return e
}

func errNotPersisted(msg string) *apiError {
	return newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeNotPersisted, msg)
}

// writeError answers e. Refusals carry x-should-retry: false, so the
// official OpenAI SDKs do not retry what would be refused again.
func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case e.retryAfter > 0:
		w.Header().Set("Retry-After", strconv.Itoa(int(max(e.retryAfter/time.Second, 1))))
		w.Header().Set(gatewayapi.HeaderShouldRetry, "true")
	case e.status == http.StatusTooManyRequests || e.status == http.StatusConflict || e.status < 500:
		w.Header().Set(gatewayapi.HeaderShouldRetry, "false")
	}
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(gatewayapi.ErrorBody{Error: e.body})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// concurrencyRetryAfter is when an attempt refused for its requests under
// way is told to ask again.
const concurrencyRetryAfter = time.Second

// concurrencyRefusal refuses a model request or tool call of an attempt
// that has underWay of them already, limit being as many as it is served at
// once (nil: within the bound). Nothing is dispatched or counted; the
// attempt asks again when one has ended.
func concurrencyRefusal(underWay, limit int) *apiError {
	if underWay < limit {
		return nil
	}
	e := newError(http.StatusTooManyRequests, gatewayapi.TypeRateLimit, gatewayapi.CodeTooManyConcurrent, fmt.Sprintf(
		"the attempt already has %d model requests and tool calls under way, as many as the gateway serves one attempt at once "+
			"(--max-attempt-concurrency); nothing was dispatched: ask again when one has ended (Retry-After: %d)",
		underWay, int(concurrencyRetryAfter/time.Second)))
	e.retryAfter = concurrencyRetryAfter
	return e
}
