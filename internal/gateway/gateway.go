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
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Defaults of Options.
const (
	// DefaultFlushInterval is how often coalesced facts are written per attempt.
	DefaultFlushInterval = time.Second
	// DefaultPollInterval is how often a waiting request (an approval, the
	// watch) re-reads its attempt from the cache, in case an event was missed.
	DefaultPollInterval = 2 * time.Second
	// DefaultPodWait is how long a first request waits for the operator to
	// record its pod on the RunAttempt (spec.podUID).
	DefaultPodWait = 15 * time.Second
	// DefaultUpstreamTimeout bounds one upstream model request.
	DefaultUpstreamTimeout = 10 * time.Minute
	// DefaultMaxTokens is the max_tokens the gateway sets, when a request and
	// its model set none, for a request under a token grant.
	DefaultMaxTokens = 4096
	// DefaultApprovalTimeout is how long a call waits for a decision when
	// the policy sets no approvalTimeout.
	DefaultApprovalTimeout = 15 * time.Minute
	// DefaultMinCallTime is the least time before the run's deadline a
	// call needs to be started.
	DefaultMinCallTime = time.Second
	// DefaultToolTimeout bounds one tool call when its server sets no timeout.
	DefaultToolTimeout = 30 * time.Second
	// DefaultMaxModelResponseBytes bounds a provider's non-streaming answer
	// (and one line of a streamed one), which the gateway holds in memory.
	DefaultMaxModelResponseBytes = 8 << 20
	// DefaultMaxToolResultBytes bounds a tool server's answer to one call.
	DefaultMaxToolResultBytes = 4 << 20
	// DefaultMaxAttemptConcurrency bounds an attempt's model requests and
	// tool calls under way at once.
	DefaultMaxAttemptConcurrency = 32
	// keeperIdle is how long a keeper of an ended attempt is kept after its
	// last request.
	keeperIdle = 2 * time.Minute
)

// Options configures a Gateway.
type Options struct {
	// Client reads RunAttempts, Secrets and report ConfigMaps (a cache in
	// the gateway binary) and writes RunAttempt status and reports.
	Client client.Client
	// APIReader reads live, for conflict retries (default Client).
	APIReader client.Reader
	// Authenticator checks bearer tokens (a TokenReviewer in the binary).
	Authenticator Authenticator
	// Upstream sends model requests to providers (default: no overall
	// timeout; UpstreamTimeout bounds each request).
	Upstream *http.Client
	// ToolTransport carries MCP requests to tool servers (default: a clone
	// of http.DefaultTransport).
	ToolTransport http.RoundTripper
	// Namespace is the gateway's namespace: a tool server's Service without
	// a namespace is looked up there (default agentrun-system).
	Namespace string
	// InterceptorAuthenticator is what the auth interceptor re-checks a
	// caller's token with (default Authenticator). The binary gives it a
	// TokenReviewer without a cache: a fresh review per tool call, so a
	// revoked token stops tool calls at once and a TokenReview outage fails
	// the interceptor (closed) rather than being hidden by a cache.
	InterceptorAuthenticator Authenticator
	// Interceptors implement the policies' interceptor chains, by name
	// (default: chain.Builtins — auth over Authenticator, rate_limit,
	// redact and audit to AuditLog). Entries here are added to the
	// built-ins, replacing one of the same name.
	Interceptors chain.Registry
	// AuditLog receives the audit interceptor's JSON lines (default stdout).
	AuditLog io.Writer
	// RateLimit and RateBurst are the rate_limit interceptor's calls per
	// second and burst per identity (default 20 and 40).
	RateLimit float64
	RateBurst int
	// UpstreamTimeout bounds one upstream request (default 10m); the run's
	// deadline bounds it further (callWindow).
	UpstreamTimeout time.Duration
	// MinCallTime is the least time a model request or door tool call must
	// have before the run's deadline to be started (default 1s).
	MinCallTime time.Duration
	// MaxModelResponseBytes bounds a provider's non-streaming answer and
	// one line of a streamed one (default DefaultMaxModelResponseBytes).
	MaxModelResponseBytes int64
	// MaxToolResultBytes bounds a tool server's answer to one request
	// (default DefaultMaxToolResultBytes).
	MaxToolResultBytes int64
	// MaxAttemptConcurrency bounds the model requests and tool calls one
	// attempt has under way at once (default DefaultMaxAttemptConcurrency);
	// more are refused 429 too_many_concurrent_requests.
	MaxAttemptConcurrency int
	// Clock is the only source of time (default real).
	Clock clock.WithTickerAndDelayedExecution
	// FlushInterval, PollInterval, PodWait: see the defaults.
	FlushInterval time.Duration
	PollInterval  time.Duration
	PodWait       time.Duration
	// NodeName is the node this gateway instance serves (one per node):
	// a pod token bound to a pod on another node is refused, so one
	// attempt's counts are never split between instances. Empty: no check.
	NodeName string
	// DurableAdmission makes every admitted model request and tool call
	// durable (its count written to the RunAttempt) before it is dispatched;
	// concurrent admissions share one write. Without it counts are written
	// coalesced, and a crashed gateway's successor may admit again the
	// requests of the last flush interval (so a run can go that far beyond
	// its grant); with it, no crash lets a run cross its grant, at the cost
	// of one API write's latency per admission.
	DurableAdmission bool
	// MaxConflictRetries of one status write (default 10).
	MaxConflictRetries int
	// Events, if set, receives the run stream's events: model stream
	// blocks, tool calls and results, refusals (see Emitter).
	Events Emitter
	// Liveness is the gateway's Lease, its heartbeat for every attempt it
	// governs (see Liveness); without a Lease it writes heartbeatTime.
	Liveness Liveness
	// Log receives the gateway's logs.
	Log logr.Logger
	// Registry receives the gateway's metrics (default: a new registry).
	Registry prometheus.Registerer
}

// Gateway is the agent's only door: the model door (OpenAI-compatible) and
// the agent API, in front of the RunAttempts whose facts it alone writes.
type Gateway struct {
	opts    Options
	log     logr.Logger
	clock   clock.WithTickerAndDelayedExecution
	metrics *metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	drainOnce sync.Once
	drain     chan struct{} // closed by Drain: long-lived streams end

	mu      sync.Mutex
	keepers map[types.NamespacedName]*keeper
	secrets *secretCache
	tools   *toolClients

	interceptors chain.Registry
	chainMetrics *chain.Metrics
	security     *securityTracker
}

// New returns a gateway. Call Run (or Start) before serving.
func New(opts Options) (*Gateway, error) {
	if opts.Client == nil {
		return nil, errors.New("gateway: Options.Client is required")
	}
	if opts.Authenticator == nil {
		return nil, errors.New("gateway: Options.Authenticator is required")
	}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.Upstream == nil {
		// Keep connections to providers open for the concurrency an agent
		// fleet has: the default of 2 idle connections per host would dial
		// (and handshake) again for most requests under load.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 256
		opts.Upstream = &http.Client{Transport: tr}
	}
	if opts.ToolTransport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 256
		opts.ToolTransport = tr
	}
	if opts.Namespace == "" {
		opts.Namespace = "agentrun-system"
	}
	if opts.UpstreamTimeout <= 0 {
		opts.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if opts.MinCallTime <= 0 {
		opts.MinCallTime = DefaultMinCallTime
	}
	if opts.MaxModelResponseBytes <= 0 {
		opts.MaxModelResponseBytes = DefaultMaxModelResponseBytes
	}
	if opts.MaxToolResultBytes <= 0 {
		opts.MaxToolResultBytes = DefaultMaxToolResultBytes
	}
	if opts.MaxAttemptConcurrency <= 0 {
		opts.MaxAttemptConcurrency = DefaultMaxAttemptConcurrency
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.PodWait <= 0 {
		opts.PodWait = DefaultPodWait
	}
	if opts.MaxConflictRetries <= 0 {
		opts.MaxConflictRetries = 10
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	g := &Gateway{
		opts: opts, log: opts.Log, clock: opts.Clock,
		metrics: newMetrics(opts.Registry),
		keepers: map[types.NamespacedName]*keeper{},
		drain:   make(chan struct{}),
	}
	g.secrets = &secretCache{c: opts.Client}
	g.tools = &toolClients{g: g}
	g.interceptors = chain.Builtins(chain.BuiltinOptions{
		Authenticator: chain.AuthenticatorFunc(g.interceptorIdentity),
		RateLimit:     opts.RateLimit, Burst: opts.RateBurst, Audit: opts.AuditLog,
		Now: opts.Clock.Now, Log: opts.Log,
	})
	maps.Copy(g.interceptors, opts.Interceptors)
	g.chainMetrics = chain.NewMetrics(opts.Registry)
	g.security = newSecurityTracker(opts.Clock, g.notifySecurity)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.wg.Add(1)
	go g.janitor()
	if g.opts.Liveness.defaults(); g.governs() {
		lk := newLeaseKeeper(g)
		g.wg.Go(func() { lk.run(g.ctx) })
	}
	return g, nil
}

// Drain ends every attempt watch stream (clients reconnect, to another
// instance's restart), so an HTTP server's graceful shutdown does not wait
// for streams that never end on their own. Call it before that shutdown.
func (g *Gateway) Drain() { g.drainOnce.Do(func() { close(g.drain) }) }

// Shutdown writes every keeper's pending facts (bounded by ctx) and stops
// the gateway's background work.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	ks := make([]*keeper, 0, len(g.keepers))
	for _, k := range g.keepers {
		ks = append(ks, k)
	}
	g.mu.Unlock()
	var errs []error
	for _, k := range ks {
		k.mu.Lock()
		dirty := k.dirty && !k.deleted
		k.mu.Unlock()
		if dirty {
			if err := k.writeOnce(ctx); err != nil {
				errs = append(errs, fmt.Errorf("RunAttempt %s: %w", k.key, err))
			}
		}
	}
	g.cancel()
	g.wg.Wait()
	g.tools.close()
	// What audit queued is written before the gateway stops (bounded by ctx).
	if err := g.interceptors.Drain(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Observe takes a RunAttempt the gateway's informer saw (added or updated),
// so waiting requests see a new grant, phase, mode or approval at once.
func (g *Gateway) Observe(ra *v1alpha1.RunAttempt) {
	g.mu.Lock()
	k := g.keepers[types.NamespacedName{Namespace: ra.Namespace, Name: ra.Name}]
	g.mu.Unlock()
	if k != nil {
		k.applySpec(ra)
	}
}

// Forget takes a RunAttempt's deletion.
func (g *Gateway) Forget(key types.NamespacedName) {
	g.mu.Lock()
	k := g.keepers[key]
	g.mu.Unlock()
	if k != nil {
		k.markDeleted()
	}
}

// janitor retires keepers of ended attempts nobody calls any more.
func (g *Gateway) janitor() {
	defer g.wg.Done()
	t := g.clock.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C():
		}
		now := g.clock.Now()
		g.mu.Lock()
		for key, k := range g.keepers {
			if k.settledIdle(now, keeperIdle) {
				delete(g.keepers, key)
				k.closeChain()
			}
		}
		g.mu.Unlock()
	}
}

// interceptorIdentity is the auth interceptor's check of the caller's
// token: the gateway's authenticator (TokenReview, cached briefly), whose
// failure — the API server unreachable — fails the interceptor.
func (g *Gateway) interceptorIdentity(ctx context.Context, token string) (string, error) {
	a := g.opts.InterceptorAuthenticator
	if a == nil || ctx.Value(modelCallKey{}) != nil {
		a = g.opts.Authenticator
	}
	id, err := a.Authenticate(ctx, token)
	if errors.Is(err, ErrUnauthenticated) {
		return "", fmt.Errorf("%w: %w", chain.ErrTokenRejected, err)
	}
	if err != nil {
		return "", err
	}
	return id.Username + "/" + id.PodName, nil
}

// Handler serves the model door (/v1/...) and the agent API (/agentrun/v1/...).
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+gatewayapi.ModelPathPrefix+"/chat/completions", g.attempt("chat", g.chatCompletions))
	mux.Handle("POST "+gatewayapi.ModelPathPrefix+"/responses", g.attempt("responses", g.responses))
	mux.Handle("GET "+gatewayapi.ModelPathPrefix+"/models", g.attempt("models", g.listModels))
	mux.Handle("POST "+gatewayapi.ModelPathPrefix+"/messages", anthropicShape(g.attempt("messages", g.messages)))
	mux.Handle("POST "+gatewayapi.ModelPathPrefix+"/messages/count_tokens", anthropicShape(g.attempt("count_tokens", g.countTokens)))
	mux.Handle(gatewayapi.MCPPath, g.mcpHandler())
	p := gatewayapi.PathPrefix + "/self"
	mux.Handle("GET "+p, g.attempt("self", g.getSelf))
	mux.Handle("GET "+p+"/watch", g.attempt("watch", g.watchSelf))
	mux.Handle("POST "+p+"/heartbeat", g.attempt("heartbeat", g.heartbeat))
	mux.Handle("POST "+p+"/steps", g.attempt("steps", g.postStep))
	mux.Handle("POST "+p+"/finish", g.attempt("finish", g.postFinish))
	mux.Handle("PUT "+p+"/checkpoint", g.attempt("checkpoint", g.putCheckpoint))
	mux.Handle("POST "+p+"/advice", g.attempt("advice", g.postAdvice))
	mux.Handle("POST "+p+"/faults", g.attempt("faults", g.postFault))
	mux.Handle("POST "+p+"/toolcalls", g.attempt("toolcalls", g.postToolCall))
	mux.Handle("POST "+p+"/toolcalls/{id}/outcome", g.attempt("outcome", g.postToolOutcome))
	mux.Handle("GET "+p+"/report", g.attempt("report", g.getReport))
	mux.Handle("PUT "+p+"/report/plan", g.attempt("plan", g.putPlan))
	mux.Handle("POST "+p+"/report/sections", g.attempt("publish", g.postSection))
	mux.Handle("POST "+p+"/settle", g.attempt("settle", g.postSettle))
	mux.Handle("POST "+p+"/children", g.attempt("spawn", g.postChild))
	mux.Handle("GET "+p+"/children", g.attempt("children", g.getChildren))
	mux.Handle("GET "+p+"/children/{name}", g.attempt("child", g.getChild))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, gatewayapi.TypeNotFound, gatewayapi.CodeNotFound,
			fmt.Sprintf("no route %s %s; the gateway serves %s/... (OpenAI-compatible) and %s/self/... (the agent API)",
				r.Method, r.URL.Path, gatewayapi.ModelPathPrefix, gatewayapi.PathPrefix)))
	})
	return mux
}

// attemptHandler serves one route for an authenticated attempt.
type attemptHandler func(w http.ResponseWriter, r *http.Request, k *keeper)

// attempt authenticates the request, maps its pod to its RunAttempt, and
// calls h with the attempt's keeper.
func (g *Gateway) attempt(route string, h attemptHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := g.clock.Now()
		k, e := g.resolve(r)
		if e != nil {
			g.metrics.refusals.WithLabelValues("", "", e.body.Code).Inc()
			writeError(w, e)
			return
		}
		k.begin(route == "watch")
		defer k.end()
		h(w, withArrival(r, start, route), k)
		g.metrics.apiSeconds.WithLabelValues(route).Observe(g.clock.Since(start).Seconds())
	})
}

// resolve authenticates the request and returns its attempt's keeper.
func (g *Gateway) resolve(r *http.Request) (*keeper, *apiError) {
	ctx := r.Context()
	id, err := g.opts.Authenticator.Authenticate(ctx, bearer(r))
	if errors.Is(err, ErrUnauthenticated) {
		return nil, newError(http.StatusUnauthorized, gatewayapi.TypeAuthentication, gatewayapi.CodeInvalidToken,
			"the bearer token is missing, invalid, expired or not issued for audience "+gatewayapi.Audience+
				" (attempt pods find theirs in $"+gatewayapi.EnvTokenFile+")")
	}
	if err != nil {
		g.log.Error(err, "Could not authenticate a request")
		return nil, newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeNotPersisted,
			"the gateway could not check the token with the API server; try again")
	}
	if id.PodUID == "" || id.PodName == "" || id.Namespace == "" {
		return nil, newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeNotAnAttempt,
			fmt.Sprintf("%s is not bound to a pod: only attempt pods, with their projected token, may use the gateway", id.Username))
	}
	if g.opts.NodeName != "" && id.NodeName != "" && id.NodeName != g.opts.NodeName {
		return nil, newError(http.StatusMisdirectedRequest, gatewayapi.TypePermission, gatewayapi.CodeWrongNode,
			fmt.Sprintf("pod %s runs on node %s; its gateway is the one on that node (this one serves %s), "+
				"so an attempt's counts are never split", id.PodName, id.NodeName, g.opts.NodeName))
	}
	key := types.NamespacedName{Namespace: id.Namespace, Name: id.PodName}
	g.mu.Lock()
	k := g.keepers[key]
	g.mu.Unlock()
	if k != nil && k.podUID() == id.PodUID {
		return k, nil
	}
	obj, e := g.awaitPod(ctx, key, id)
	if e != nil {
		return nil, e
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if k := g.keepers[key]; k != nil && k.podUID() == id.PodUID {
		return k, nil
	}
	k = newKeeper(g, obj)
	g.keepers[key] = k
	g.wg.Go(func() { k.run(g.ctx) })
	return k, nil
}

// awaitPod reads the pod's RunAttempt, waiting (PodWait) for the operator to
// record the pod's UID on it.
func (g *Gateway) awaitPod(ctx context.Context, key types.NamespacedName, id Identity) (*v1alpha1.RunAttempt, *apiError) {
	deadline := g.clock.Now().Add(g.opts.PodWait)
	for {
		obj := &v1alpha1.RunAttempt{}
		err := g.opts.Client.Get(ctx, key, obj)
		switch {
		case err == nil && obj.Spec.PodUID == id.PodUID:
			return obj, nil
		case err == nil && obj.Spec.PodUID != "":
			return nil, newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeNotAnAttempt,
				fmt.Sprintf("RunAttempt %s belongs to pod UID %s, not to the pod this token is bound to (%s)",
					key, obj.Spec.PodUID, id.PodUID))
		case err != nil && !apierrors.IsNotFound(err):
			g.log.Error(err, "Could not read RunAttempt", "runattempt", key)
			return nil, newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeNotPersisted,
				fmt.Sprintf("could not read RunAttempt %s; try again", key))
		}
		if !g.clock.Now().Before(deadline) {
			why := "does not exist"
			if err == nil {
				why = "records no pod yet"
			}
			return nil, newError(http.StatusForbidden, gatewayapi.TypePermission, gatewayapi.CodeNotAnAttempt,
				fmt.Sprintf("pod %s is not the pod of an attempt: RunAttempt %s %s", id.PodName, key, why))
		}
		select {
		case <-ctx.Done():
			return nil, newError(http.StatusServiceUnavailable, gatewayapi.TypeServer, gatewayapi.CodeNotPersisted,
				"the request ended while waiting for RunAttempt "+key.String())
		case <-g.clock.After(200 * time.Millisecond):
		}
	}
}
