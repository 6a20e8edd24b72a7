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

// Package chain is the gateway's interceptor chain engine: it runs a
// RuntimePolicy's resolved interceptor chain (spec.policy.resolvedChain of
// a RunAttempt) around every tool call and model request agentrun-gateway
// dispatches. The chain runs in the gateway, not in the agent's process: an
// interceptor inside the agent is bypassed once and so bypassed entirely.
//
// # API
//
//	reg := chain.Builtins(chain.BuiltinOptions{Authenticator: a, Audit: w})
//	m := chain.NewMetrics(prometheus.DefaultRegisterer) // once per gateway
//	c, err := chain.New(attempt.Spec.Policy.ResolvedChain, reg, m)
//	// err (wraps ErrNotImplemented) names every entry reg lacks: refuse the
//	// policy's calls with it.
//	defer c.Close()
//	out, refusal := c.Run(ctx, &chain.Call{...}, dispatch)
//	// refusal != nil: answer with refusal.Error(); out is empty. (Compare
//	// the *Refusal with nil before treating it as an error value.)
//
// Build the Registry once per gateway: the built-ins' state (rate buckets,
// the audit writer) is shared by every Chain built from it, so replacing a
// policy's Chain keeps its callers' buckets. The gateway's TokenReviewer
// plugs into auth through an adapter:
//
//	chain.AuthenticatorFunc(func(ctx context.Context, tok string) (string, error) {
//		id, err := reviewer.Authenticate(ctx, tok)
//		if errors.Is(err, ErrUnauthenticated) {
//			return "", fmt.Errorf("%w: %w", chain.ErrTokenRejected, err)
//		}
//		return id.Username + "/" + id.PodName, err
//	})
//
// # Semantics
//
// Order is the resolved chain's, exactly: the operator sorted it (phase,
// priority, registration) and the engine never sorts again. Pre and Around
// entries run in that order before dispatch, Post entries after it.
//
//   - Pre: a Veto(reason) from an entry with veto rights refuses the call
//     (Refusal.Veto). A veto from any other entry is logged, counted
//     (outcome veto_ignored) and ignored.
//   - Any other error, and a panic, is handled by the entry's own posture
//     (onError): Deny (and anything but Allow) fails closed, the call is
//     refused naming the interceptor and its error, nothing is dispatched;
//     Allow fails open, the error is logged and counted and the chain
//     continues. There is no chain-wide error policy.
//   - Around: acquires before dispatch; its releases run in reverse order
//     exactly once on every path (after dispatch, before the Post entries;
//     on a refusal by a later entry; when dispatch panics, which Run lets
//     propagate). A panicking release is logged.
//   - Post: sees the outcome and may rewrite it (and the call's arguments,
//     for audit). A Deny entry that errors withholds the result: the caller
//     gets a Refusal with Dispatched set ("the call ran but its result is
//     withheld"), since the effect has already happened; the Post entries
//     after it do not run (they depend on its output: audit must not record
//     what redact failed to clean). The gateway's write-ahead record, not
//     audit, is what says the call ran.
//   - Buffered entries (onError Allow, buffered, Pre or Post) keep a copy of
//     each failed output (the call without its token, and the outcome) in a
//     bounded per-interceptor buffer (WithBufferLimit, default 1000; beyond
//     it the oldest is dropped and counted) and the Chain's resender calls
//     the hook again with it every WithResendInterval until it succeeds.
//     The resender's goroutine runs only while something is buffered.
//     Resends are not in call order. Close makes a last attempt, drops and
//     counts the rest, and stops the resender; the gateway closes a Chain
//     when it replaces it and at shutdown.
//
// A Chain is immutable and safe for concurrent use. An empty (or nil)
// Chain calls dispatch directly, allocating nothing.
//
// # Built-in interceptors (Builtins)
//
//   - auth (Pre): re-checks Call.Token with the Authenticator and sets
//     Call.Identity; a rejected token is a veto, an Authenticator that
//     cannot answer (TokenReview down) is an error of auth, which its
//     posture (Deny) turns into a refusal.
//   - rate_limit (Pre): a token bucket per Call.Identity (or
//     Namespace/Run when there is none), BuiltinOptions.RateLimit per
//     second with BuiltinOptions.Burst; over it, a veto.
//   - redact (Pre or Post): RedactArguments on the arguments (and, as Post,
//     RedactText on the result).
//   - audit (Post, buffered): one JSON line (AuditRecord) per call to
//     BuiltinOptions.Audit, through a bounded queue (AuditQueue) that the
//     sink's own goroutine writes: a call never waits on the writer, and a
//     line the writer fails to take is written again until it is. A full
//     queue is audit's error (ErrQueueFull), handled by its posture.
//
// Every hook runs under its entry's timeout (Timeout, default
// v1alpha1.DefaultInterceptorTimeout): its context's deadline; an error
// once it passed is a *TimeoutError. Entries with enforcement Agent are not
// run. BuiltinPhases is the one list of what the gateway implements, which
// admission checks policies against; Registry.Drain writes what is queued
// at shutdown.
//
// # Metrics (NewMetrics)
//
// agentrun_gateway_interceptor_seconds{interceptor,phase},
// agentrun_gateway_interceptor_calls_total{interceptor,outcome} (ok, error,
// veto, veto_ignored, panic), agentrun_gateway_interceptor_denials_total
// {interceptor}, agentrun_gateway_interceptor_chain_added_seconds{kind}
// (total minus dispatch), agentrun_gateway_interceptor_resends_total,
// _dropped_total, _buffered and _queue_full_total {interceptor}.
//
// The token is never logged, audited or buffered; logs carry the call's
// kind, tool and run, never its arguments.
package chain
