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
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Keys of a pod-bound service-account token's user info (TokenReview).
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
	extraNode    = "authentication.kubernetes.io/node-name"
)

// Identity is who a request comes from, as the API server vouches.
type Identity struct {
	// Username, e.g. system:serviceaccount:team:agentrun-runner.
	Username string
	// Namespace of the service account ("" for other users).
	Namespace string
	// PodName and PodUID of the pod the token is bound to ("" if unbound).
	PodName string
	PodUID  string
	// NodeName is the node the pod runs on, when the API server says so.
	NodeName string
}

// Authenticator turns a bearer token into an identity. It returns
// ErrUnauthenticated for a token it does not accept.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// ErrUnauthenticated is returned for a token that is missing, invalid,
// expired or of another audience.
var ErrUnauthenticated = errors.New("unauthenticated")

// TokenReviewer authenticates tokens with the API server's TokenReview for
// the gateway's audience, caching each answer briefly (by a hash of the
// token: tokens are never kept or logged). A rejected token is remembered
// too (RejectTTL), so a pod repeating a garbage token does not turn each
// request into a TokenReview, and at most MaxInFlight reviews are under way
// at once: any pod may reach the gateway, and every review it causes is an
// API-server request.
type TokenReviewer struct {
	// Client creates TokenReviews (the gateway's own identity needs
	// create on authentication.k8s.io/tokenreviews).
	Client client.Client
	// Audience the token must be issued for (default gatewayapi.Audience).
	Audience string
	// TTL of a cached answer (default 10s). A revoked token (its pod
	// deleted) is therefore accepted for at most TTL more. NoCache asks
	// the API server every time (the auth interceptor's fresh check).
	TTL     time.Duration
	NoCache bool
	// RejectTTL is how long a rejected token is answered from memory
	// (default DefaultRejectTTL); negative: never. At most maxCachedTokens
	// rejections are kept, so garbage tokens cannot grow memory.
	RejectTTL time.Duration
	// MaxInFlight bounds the TokenReviews under way at once (default
	// DefaultMaxTokenReviews); more wait for a slot, until their request
	// ends.
	MaxInFlight int
	// Registry receives the reviewer's metrics (none if nil). Two reviewers
	// may share one: they share its series.
	Registry prometheus.Registerer
	// Clock (default real).
	Clock clock.PassiveClock

	once     sync.Once
	slots    chan struct{}
	metrics  *reviewMetrics
	mu       sync.Mutex
	cache    map[[32]byte]cachedIdentity
	rejected map[[32]byte]time.Time // expiry of a rejection
}

// Defaults of TokenReviewer.
const (
	// DefaultRejectTTL is how long a rejected token is remembered.
	DefaultRejectTTL = 5 * time.Second
	// DefaultMaxTokenReviews bounds the TokenReviews under way at once.
	DefaultMaxTokenReviews = 32
)

// reviewMetrics count what the reviewer asked the API server and what it
// answered from memory.
type reviewMetrics struct {
	reviews *prometheus.CounterVec // by result: authenticated, rejected, error
	cached  *prometheus.CounterVec // by answer: authenticated, rejected
	waited  prometheus.Counter
}

func newReviewMetrics(reg prometheus.Registerer) *reviewMetrics {
	m := &reviewMetrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_token_reviews_total",
			Help: "TokenReviews the gateway sent to the API server, by result (authenticated, rejected, error).",
		}, []string{labelResult}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentrun_gateway_token_cache_hits_total",
			Help: "Tokens answered from memory without a TokenReview, by answer (authenticated, rejected).",
		}, []string{"answer"}),
		waited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_gateway_token_review_waits_total",
			Help: "TokenReviews that waited for a slot because --max-token-reviews were under way.",
		}),
	}
	if reg == nil {
		return m
	}
	m.reviews = registerOrReuse(reg, m.reviews)
	m.cached = registerOrReuse(reg, m.cached)
	m.waited = registerOrReuse(reg, m.waited)
	return m
}

// registerOrReuse registers c, or returns the collector already registered
// under its name.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

type cachedIdentity struct {
	id      Identity
	expires time.Time
}

// maxCachedTokens bounds the cache: one entry per live attempt pod, and a
// few for rotation.
const maxCachedTokens = 8192

// Authenticate implements Authenticator.
func (t *TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, ErrUnauthenticated
	}
	aud := t.Audience
	if aud == "" {
		aud = gatewayapi.Audience
	}
	ttl := t.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if t.Clock != nil {
		clk = t.Clock
	}
	t.once.Do(func() {
		t.slots = make(chan struct{}, cmp.Or(max(t.MaxInFlight, 0), DefaultMaxTokenReviews))
		t.metrics = newReviewMetrics(t.Registry)
	})
	sum := sha256.Sum256([]byte(token))
	now := clk.Now()
	t.mu.Lock()
	if c, ok := t.cache[sum]; ok && now.Before(c.expires) && !t.NoCache {
		t.mu.Unlock()
		t.metrics.cached.WithLabelValues("authenticated").Inc()
		return c.id, nil
	}
	if exp, ok := t.rejected[sum]; ok && now.Before(exp) {
		t.mu.Unlock()
		t.metrics.cached.WithLabelValues("rejected").Inc()
		return Identity{}, ErrUnauthenticated
	}
	t.mu.Unlock()

	select {
	case t.slots <- struct{}{}:
	default:
		t.metrics.waited.Inc()
		select {
		case t.slots <- struct{}{}:
		case <-ctx.Done():
			return Identity{}, fmt.Errorf("TokenReview: waiting for one of %d reviews under way: %w", cap(t.slots), context.Cause(ctx))
		}
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{aud}}}
	err := t.Client.Create(ctx, tr)
	<-t.slots
	if err != nil {
		t.metrics.reviews.WithLabelValues("error").Inc()
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, aud) {
		t.metrics.reviews.WithLabelValues("rejected").Inc()
		t.remember(sum, now)
		return Identity{}, ErrUnauthenticated
	}
	t.metrics.reviews.WithLabelValues("authenticated").Inc()
	id := Identity{Username: tr.Status.User.Username}
	if rest, ok := strings.CutPrefix(id.Username, "system:serviceaccount:"); ok {
		id.Namespace, _, _ = strings.Cut(rest, ":")
	}
	if v := tr.Status.User.Extra[extraPodName]; len(v) > 0 {
		id.PodName = v[0]
	}
	if v := tr.Status.User.Extra[extraPodUID]; len(v) > 0 {
		id.PodUID = v[0]
	}
	if v := tr.Status.User.Extra[extraNode]; len(v) > 0 {
		id.NodeName = v[0]
	}

	if t.NoCache {
		return id, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cache == nil {
		t.cache = map[[32]byte]cachedIdentity{}
	}
	if len(t.cache) >= maxCachedTokens {
		for k, c := range t.cache {
			if !now.Before(c.expires) || len(t.cache) >= maxCachedTokens {
				delete(t.cache, k)
			}
		}
	}
	t.cache[sum] = cachedIdentity{id: id, expires: now.Add(ttl)}
	delete(t.rejected, sum)
	return id, nil
}

// remember keeps a rejection for RejectTTL. The table holds at most
// maxCachedTokens: expired entries go first, then any.
func (t *TokenReviewer) remember(sum [32]byte, now time.Time) {
	ttl := t.RejectTTL
	if ttl == 0 {
		ttl = DefaultRejectTTL
	}
	if ttl < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rejected == nil {
		t.rejected = map[[32]byte]time.Time{}
	}
	if len(t.rejected) >= maxCachedTokens {
		for k, exp := range t.rejected {
			if !now.Before(exp) || len(t.rejected) >= maxCachedTokens {
				delete(t.rejected, k)
			}
		}
	}
	t.rejected[sum] = now.Add(ttl)
}

// StaticTokens is an Authenticator for tests and the conformance suite:
// a fixed map of tokens to identities.
type StaticTokens map[string]Identity

// Authenticate implements Authenticator.
func (s StaticTokens) Authenticate(_ context.Context, token string) (Identity, error) {
	if id, ok := s[token]; ok && token != "" {
		return id, nil
	}
	return Identity{}, ErrUnauthenticated
}

// bearer returns the request's bearer token ("" if none).
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(tok)
	}
	if tok, ok := strings.CutPrefix(h, "bearer "); ok {
		return strings.TrimSpace(tok)
	}
	// The Anthropic SDKs send the key in x-api-key; some clients send it in
	// api-key (Azure style).
	if tok := strings.TrimSpace(r.Header.Get("x-api-key")); tok != "" {
		return tok
	}
	return strings.TrimSpace(r.Header.Get("api-key"))
}
