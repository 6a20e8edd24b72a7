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

package research

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// Built-in interceptors the research agent registers, under the names the
// sample RuntimePolicy uses. A policy may name others: register them in
// Config.Interceptors, or the agent refuses to start.
const (
	// InterceptorAuth (Pre) establishes the caller's identity (the pod) for
	// later interceptors; it vetoes a call when no identity is known.
	InterceptorAuth = "auth"
	// InterceptorRateLimit (Pre: spaces calls per identity; Around: bounds
	// concurrent calls).
	InterceptorRateLimit = "rate_limit"
	// InterceptorRedact (Pre: arguments; Post: results) removes credentials.
	InterceptorRedact = "redact"
	// InterceptorAudit (Pre or Post) writes one JSON line per call.
	InterceptorAudit = "audit"
	// InterceptorLog (Pre or Post) logs calls.
	InterceptorLog = "log"
)

// secretPatterns are what redact removes.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`sk-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}`),
	regexp.MustCompile(`AKIA[0-9A-Z]{16}`),
	regexp.MustCompile(`(?i)(password|passwd|secret|api[_-]?key|token)\s*[:=]\s*\S+`),
}

// Redact replaces credentials in s with [REDACTED].
func Redact(s string) string {
	for _, p := range secretPatterns {
		s = p.ReplaceAllString(s, "[REDACTED]")
	}
	return s
}

func redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return Redact(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = redactValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactValue(e)
		}
		return out
	}
	return v
}

// builtinInterceptors returns the built-in implementations.
func builtinInterceptors(identity string, clk clock.Clock, minInterval time.Duration, audit io.Writer,
	log logr.Logger) map[string]agent.Interceptor {
	limiter := &rateLimiter{clock: clk, interval: minInterval, last: map[string]time.Time{}, slots: make(chan struct{}, 8)}
	auditor := &auditor{w: audit, clock: clk}
	return map[string]agent.Interceptor{
		InterceptorAuth: {Pre: func(_ context.Context, c *agent.Call) error {
			if identity == "" {
				return agent.Veto("no identity: neither POD_NAME nor the RunAttempt name is known")
			}
			if c.Attributes == nil {
				c.Attributes = map[string]string{}
			}
			c.Attributes["identity"] = identity
			return nil
		}},
		InterceptorRateLimit: {Pre: limiter.pre, Around: limiter.around},
		InterceptorRedact: {
			Pre: func(_ context.Context, c *agent.Call) error {
				if c.Args != nil {
					c.Args, _ = redactValue(c.Args).(map[string]any)
				}
				return nil
			},
			Post: func(_ context.Context, _ *agent.Call, o *agent.Outcome) error {
				o.Result = Redact(o.Result)
				return nil
			},
		},
		InterceptorAudit: {
			Pre:  func(_ context.Context, c *agent.Call) error { return auditor.write(c, nil) },
			Post: func(_ context.Context, c *agent.Call, o *agent.Outcome) error { return auditor.write(c, o) },
		},
		InterceptorLog: {
			Pre: func(_ context.Context, c *agent.Call) error {
				log.V(1).Info("Calling", "kind", c.Kind, "name", c.Name, "id", c.ID)
				return nil
			},
			Post: func(_ context.Context, c *agent.Call, o *agent.Outcome) error {
				log.V(1).Info("Called", "kind", c.Kind, "name", c.Name, "id", c.ID, "error", o.Err)
				return nil
			},
		},
	}
}

// rateLimiter spaces calls of one identity by interval (Pre) and bounds
// concurrent calls (Around).
type rateLimiter struct {
	clock    clock.Clock
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	slots    chan struct{}
}

func (l *rateLimiter) pre(ctx context.Context, c *agent.Call) error {
	if l.interval <= 0 {
		return nil
	}
	id := c.Attributes["identity"]
	l.mu.Lock()
	next := l.last[id].Add(l.interval)
	now := l.clock.Now()
	wait := max(next.Sub(now), 0)
	l.last[id] = now.Add(wait)
	l.mu.Unlock()
	if wait == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-l.clock.After(wait):
		return nil
	}
}

func (l *rateLimiter) around(ctx context.Context, _ *agent.Call) (func(agent.Outcome), error) {
	select {
	case l.slots <- struct{}{}:
		return func(agent.Outcome) { <-l.slots }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// auditor writes one JSON line per call. A write error fails the
// interceptor; with posture Allow and buffered, the SDK resends it later.
type auditor struct {
	mu    sync.Mutex
	w     io.Writer
	clock clock.PassiveClock
}

func (a *auditor) write(c *agent.Call, o *agent.Outcome) error {
	rec := map[string]any{
		"time": a.clock.Now().UTC().Format(time.RFC3339), "kind": c.Kind, "name": c.Name, "id": c.ID,
		"fingerprint": c.Fingerprint, "identity": c.Attributes["identity"],
	}
	if o == nil {
		rec["stage"] = "before"
	} else {
		rec["stage"] = "after"
		if o.Err != nil {
			rec["error"] = Redact(o.Err.Error())
		}
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}
