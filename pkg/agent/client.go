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

package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// GatewayError is an error answer of the gateway. errors.Is matches the
// refusal and stop sentinels its code stands for (ErrGrantExhausted for
// grant_exhausted and reserve_exhausted, ErrTerminated for run_terminated, …).
type GatewayError struct {
	// Status is the HTTP status.
	Status int
	// Code is the gateway's stable error code (gatewayapi.Code*).
	Code string
	// Message is the gateway's sentence.
	Message string
	// Param names the request field at fault, if any.
	Param string
}

func (e *GatewayError) Error() string {
	return fmt.Sprintf("gateway: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Is maps the gateway's codes to the SDK's sentinels.
func (e *GatewayError) Is(target error) bool {
	return sentinelOf(e.Code) == target
}

// sentinelOf is the SDK sentinel a gateway error code stands for.
func sentinelOf(code string) error {
	switch code {
	case gatewayapi.CodeGrantExhausted, gatewayapi.CodeReserveExhausted:
		return ErrGrantExhausted
	case gatewayapi.CodeFinalizeOnly:
		return ErrFinalizeOnly
	case gatewayapi.CodePermissionDenied:
		return ErrPermissionDenied
	case gatewayapi.CodeApprovalDenied, gatewayapi.CodeApprovalExpired:
		return ErrApprovalDenied
	case gatewayapi.CodeInterceptorRefused:
		return ErrInterceptorDenied
	case gatewayapi.CodeUnknownTool:
		return ErrUnknownTool
	case gatewayapi.CodeRunTerminated:
		return ErrTerminated
	case gatewayapi.CodeAttemptSuperseded:
		return ErrSuperseded
	}
	return nil
}

// token returns the bearer token: the file's current content (the kubelet
// rotates it), else the fixed one.
func (a *Agent) token() (string, error) {
	if a.cfg.TokenFile == "" {
		return a.cfg.Token, nil
	}
	b, err := os.ReadFile(a.cfg.TokenFile)
	if err != nil {
		return "", fmt.Errorf("agent: token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// unreached reports whether err means the request never reached the gateway
// (so repeating it cannot count anything twice).
func unreached(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// cutOff reports whether err means the gateway went away mid-request: the
// connection closed or reset before an answer (a gateway restart).
func cutOff(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// call makes one agent API request, repeating it while the gateway cannot be
// reached at all (a restarting gateway), until ctx ends.
func (a *Agent) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	wait := 100 * time.Millisecond
	for {
		err := a.callOnce(ctx, method, path, body, out)
		if err == nil || !unreached(err) || ctx.Err() != nil {
			return err
		}
		a.log.V(1).Info("Gateway unreachable; retrying", "path", path, "error", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gateway unreachable: %v)", context.Cause(ctx), err)
		case <-a.clock.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// callDurable is call for a request that sets a fact (finish, settle): it is
// repeated, with backoff, while the gateway answers not_persisted (the API
// server did not take the write; the gateway keeps the fact and writes it
// later), until the gateway confirms the fact is durable or ctx ends.
func (a *Agent) callDurable(ctx context.Context, method, path string, in, out any) error {
	wait := 200 * time.Millisecond
	for {
		err := a.call(ctx, method, path, in, out)
		var ge *GatewayError
		if err == nil || !errors.As(err, &ge) || ge.Code != gatewayapi.CodeNotPersisted || ctx.Err() != nil {
			return err
		}
		a.log.Info("The gateway could not persist a fact yet; asking again", "path", path, "message", ge.Message)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		case <-a.clock.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func (a *Agent) callOnce(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.cfg.GatewayURL+gatewayapi.PathPrefix+path, rd)
	if err != nil {
		return err
	}
	tok, err := a.token()
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	a.traceparent(req.Header)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func readError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb gatewayapi.ErrorBody
	if json.Unmarshal(raw, &eb) != nil || eb.Error.Code == "" {
		eb.Error = gatewayapi.Error{Code: "http_" + fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(raw))}
	}
	return &GatewayError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Param: eb.Error.Param}
}

// watch streams the attempt's view (GET /self/watch) into apply until the
// stream ends or ctx does.
func (a *Agent) watch(ctx context.Context, apply func(gatewayapi.Attempt)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.cfg.GatewayURL+gatewayapi.PathPrefix+"/self/watch", nil)
	if err != nil {
		return err
	}
	tok, err := a.token()
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	a.traceparent(req.Header)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	br := bufio.NewReader(resp.Body)
	var data []byte
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[len("data:"):])...)
		case len(line) == 0 && len(data) > 0:
			var v gatewayapi.Attempt
			if json.Unmarshal(data, &v) == nil {
				apply(v)
			}
			data = data[:0]
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// OpenAI returns an OpenAI client pointed at the gateway's model door, with
// the attempt's token and no client-side retries (every try the gateway
// dispatches is a model request counted against the grant: retry
// deliberately). Make model requests inside ModelRequest to run them through
// the policy's interceptor chain.
func (a *Agent) OpenAI(opts ...option.RequestOption) openai.Client {
	base := make([]option.RequestOption, 0, 5+len(opts))
	base = append(base,
		option.WithBaseURL(a.cfg.GatewayURL+gatewayapi.ModelPathPrefix+"/"),
		option.WithHTTPClient(a.cfg.HTTPClient),
		option.WithMaxRetries(0),
		option.WithAPIKey("token-from-file"),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			tok, err := a.token()
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			a.traceparent(req.Header)
			return next(req)
		}),
	)
	return openai.NewClient(append(base, opts...)...)
}
