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

package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// Names of the built-in interceptors, as RuntimePolicy entries use them.
const (
	NameAuth      = "auth"
	NameRateLimit = "rate_limit"
	NameRedact    = "redact"
	NameAudit     = "audit"
)

// Authenticator re-checks a caller's bearer token. It returns the caller's
// identity, an error wrapping ErrTokenRejected for a token it does not
// accept (auth vetoes the call), or any other error when it cannot tell
// (e.g. TokenReview unavailable): an error of the auth interceptor, which
// its posture handles (Deny: the call is refused).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (identity string, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context, token string) (string, error)

// Authenticate implements Authenticator.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, token string) (string, error) {
	return f(ctx, token)
}

// ErrTokenRejected is wrapped by an Authenticator's error for a token that
// is missing, invalid, expired or of another audience.
var ErrTokenRejected = errors.New("token rejected")

// ErrUnavailable is wrapped by an interceptor's error when what it checks
// with cannot be reached for now (auth's TokenReview while the API server
// is away): asking again may succeed. The gateway answers such a fail-closed
// refusal interceptor_unavailable (503, ask again); any other failure —
// a panic, a missing authenticator, a redaction that cannot parse the
// arguments — fails the same way on every try and is interceptor_refused.
var ErrUnavailable = errors.New("unavailable for now")

// Unavailable marks err as ErrUnavailable without changing its message.
func Unavailable(err error) error { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) Error() string   { return u.err.Error() }
func (u unavailable) Unwrap() []error { return []error{ErrUnavailable, u.err} }

// BuiltinOptions configure the built-in interceptors.
type BuiltinOptions struct {
	// Authenticator re-checks tokens for auth (the gateway passes its cached
	// TokenReviewer). Without one, auth fails every call (fail closed under
	// onError Deny).
	Authenticator Authenticator
	// RateLimit is rate_limit's sustained rate per identity in calls per
	// second (default 20), Burst its bucket size (default 40).
	RateLimit float64
	Burst     int
	// MaxIdentities bounds how many identities rate_limit tracks (default
	// 10000): beyond it, buckets idle long enough to be full are forgotten
	// (nothing is lost), then the least recently used one.
	MaxIdentities int
	// Audit receives audit's JSON lines (default os.Stdout), one Write per
	// line, from audit's own writer goroutine: a call never waits for it.
	Audit io.Writer
	// AuditQueue bounds the lines waiting for the Audit writer (default
	// 1024). A call that finds it full is audit's failure (ErrQueueFull),
	// which its entry's posture handles.
	AuditQueue int
	// AuditRetry is how long the writer waits before writing a line again
	// after Audit failed to take it (default 1s): a queued line is kept
	// until Audit takes it.
	AuditRetry time.Duration
	// Log receives the audit writer's failures (default: discard).
	Log logr.Logger
	// Now is the clock of rate_limit and of audit lines for calls without a
	// Time (default time.Now).
	Now func() time.Time
}

// Builtins returns the gateway's built-in interceptors: auth, rate_limit,
// redact and audit.
func Builtins(opts BuiltinOptions) Registry {
	if opts.RateLimit <= 0 {
		opts.RateLimit = 20
	}
	if opts.Burst <= 0 {
		opts.Burst = 40
	}
	if opts.MaxIdentities <= 0 {
		opts.MaxIdentities = 10000
	}
	if opts.Audit == nil {
		opts.Audit = os.Stdout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.AuditQueue <= 0 {
		opts.AuditQueue = DefaultAuditQueue
	}
	if opts.AuditRetry <= 0 {
		opts.AuditRetry = time.Second
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return Registry{
		NameAuth:      authImpl(opts.Authenticator),
		NameRateLimit: newLimiter(opts.RateLimit, opts.Burst, opts.MaxIdentities, opts.Now).impl(),
		NameRedact:    redactImpl(),
		NameAudit: (&auditor{now: opts.Now,
			sink: newSink(opts.Audit, opts.AuditQueue, opts.AuditRetry, opts.Log.WithValues("interceptor", NameAudit)),
		}).impl(),
	}
}

// DefaultAuditQueue is BuiltinOptions.AuditQueue's default.
const DefaultAuditQueue = 1024

// BuiltinPhases lists the gateway's built-in interceptors with the phases
// each implements: the one list admission checks a RuntimePolicy's
// Gateway-enforced entries against (policy.ValidateImplemented). It is read
// from Builtins itself, so it cannot drift from what the gateway runs.
func BuiltinPhases() map[string][]v1alpha1.InterceptorPhase {
	return Builtins(BuiltinOptions{Audit: io.Discard}).Phases()
}

// Phases lists the registry's interceptors with the phases each implements
// (Pre, Around, Post order).
func (r Registry) Phases() map[string][]v1alpha1.InterceptorPhase {
	out := make(map[string][]v1alpha1.InterceptorPhase, len(r))
	for name, impl := range r {
		for _, p := range []v1alpha1.InterceptorPhase{v1alpha1.InterceptorPre, v1alpha1.InterceptorAround, v1alpha1.InterceptorPost} {
			if impl.has(p) {
				out[name] = append(out[name], p)
			}
		}
	}
	return out
}

// Drain stops the writers of the registry's interceptors that queue their
// output (audit) and waits until what they queued is written, or ctx ends.
// A gateway drains its registry once, at shutdown, after its last call.
func (r Registry) Drain(ctx context.Context) error {
	var errs []error
	for name, impl := range r {
		if impl.Drain != nil {
			if err := impl.Drain(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// authImpl re-checks the caller's token and sets call.Identity.
func authImpl(a Authenticator) Impl {
	return Impl{Pre: func(ctx context.Context, call *Call) error {
		if a == nil {
			return errors.New("this gateway has no authenticator configured")
		}
		if call.Token == "" {
			return Veto("the call carries no bearer token")
		}
		id, err := a.Authenticate(ctx, call.Token)
		switch {
		case errors.Is(err, ErrTokenRejected):
			return Veto("the caller's token is not accepted: " + err.Error())
		case err != nil:
			// Not a verdict on the token: the authenticator could not answer.
			return Unavailable(err)
		case id == "":
			return errors.New("the authenticator returned no identity")
		}
		call.Identity = id
		return nil
	}}
}

// limiter is a token bucket per identity.
type limiter struct {
	rate, burst float64
	max         int
	now         func() time.Time

	mu      sync.Mutex
	buckets map[string]bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst, maxIdentities int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), max: maxIdentities, now: now, buckets: map[string]bucket{}}
}

// allow takes one token from key's bucket, if it has one.
func (l *limiter) allow(key string) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if ok {
		b.tokens = l.refill(b, now)
	} else {
		if len(l.buckets) >= l.max {
			l.evict(now)
		}
		b.tokens = l.burst
	}
	b.last = now
	allowed := b.tokens >= 1
	if allowed {
		b.tokens--
	}
	l.buckets[key] = b
	return allowed
}

func (l *limiter) refill(b bucket, now time.Time) float64 {
	elapsed := max(now.Sub(b.last).Seconds(), 0)
	return min(l.burst, b.tokens+elapsed*l.rate)
}

// evict forgets the buckets that are full again (a new bucket starts
// full, so nothing changes for them), or else the least recently used one.
func (l *limiter) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	freed := false
	for k, b := range l.buckets {
		if l.refill(b, now) >= l.burst {
			delete(l.buckets, k)
			freed = true
			continue
		}
		if oldest == "" || b.last.Before(oldestAt) {
			oldest, oldestAt = k, b.last
		}
	}
	if !freed {
		delete(l.buckets, oldest)
	}
}

func (l *limiter) impl() Impl {
	return Impl{Pre: func(_ context.Context, call *Call) error {
		key := call.Identity
		if key == "" {
			key = call.Namespace + "/" + call.Run
		}
		if !l.allow(key) {
			return Veto(fmt.Sprintf("rate limit of %g calls/s (burst %g) for %s exceeded", l.rate, l.burst, key))
		}
		return nil
	}}
}

// auditor queues one JSON line per call for its sink's writer.
type auditor struct {
	sink *sink
	now  func() time.Time
}

// AuditRecord is the schema of the JSON lines audit writes (one per call,
// fields in this order). It never holds the token.
type AuditRecord struct {
	Time      time.Time       `json:"time"`
	Namespace string          `json:"namespace"`
	Run       string          `json:"run"`
	Attempt   string          `json:"attempt"`
	Policy    string          `json:"policy,omitempty"`
	Identity  string          `json:"identity"`
	Kind      Kind            `json:"kind"`
	Tool      string          `json:"tool"`
	Effect    v1alpha1.Effect `json:"effect,omitempty"`
	Risk      v1alpha1.Risk   `json:"risk,omitempty"`
	Arguments map[string]any  `json:"arguments,omitempty"`
	// ArgumentsError says why the arguments could not be encoded (they are
	// then left out, and the call is still recorded).
	ArgumentsError string `json:"argumentsError,omitempty"`
	// Outcome is "ok" or "error" (the tool reported an error, or there was
	// no result).
	Outcome     string `json:"outcome"`
	ResultBytes int    `json:"resultBytes"`
}

func (a *auditor) impl() Impl {
	return Impl{Post: func(_ context.Context, call *Call, out *Outcome) error {
		t := call.Time
		if t.IsZero() {
			t = a.now()
		}
		bp := linePool.Get().(*[]byte)
		*bp = appendAuditRecord((*bp)[:0], t, call, out)
		if err := a.sink.enqueue(bp); err != nil {
			return fmt.Errorf("queueing the audit record: %w", err)
		}
		return nil
	}, Drain: a.sink.drain}
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendAuditRecord appends the AuditRecord of call and its outcome as one
// JSON line (the fields of AuditRecord, in its order), encoding by hand all
// but the arguments.
func appendAuditRecord(b []byte, t time.Time, call *Call, out *Outcome) []byte {
	b = append(b, `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","namespace":`...)
	b = appendJSONString(b, call.Namespace)
	b = append(b, `,"run":`...)
	b = appendJSONString(b, call.Run)
	b = append(b, `,"attempt":`...)
	b = appendJSONString(b, call.Attempt)
	if call.Policy != "" {
		b = append(b, `,"policy":`...)
		b = appendJSONString(b, call.Policy)
	}
	b = append(b, `,"identity":`...)
	b = appendJSONString(b, call.Identity)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(call.Kind))
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, call.Tool)
	if call.Effect != "" {
		b = append(b, `,"effect":`...)
		b = appendJSONString(b, string(call.Effect))
	}
	if call.Risk != "" {
		b = append(b, `,"risk":`...)
		b = appendJSONString(b, string(call.Risk))
	}
	if len(call.Arguments) > 0 {
		if args, err := json.Marshal(call.Arguments); err == nil {
			b = append(b, `,"arguments":`...)
			b = append(b, args...)
		} else {
			b = append(b, `,"argumentsError":`...)
			b = appendJSONString(b, err.Error())
		}
	}
	outcome := OutcomeOK
	if out.Failed() {
		outcome = OutcomeError
	}
	b = append(b, `,"outcome":"`...)
	b = append(b, outcome...)
	b = append(b, `","resultBytes":`...)
	b = strconv.AppendInt(b, int64(len(out.Result)), 10)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string, as encoding/json would
// (without its HTML escaping): invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
