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
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

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
// token: tokens are never kept or logged).
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
	// Clock (default real).
	Clock clock.PassiveClock

	mu    sync.Mutex
	cache map[[32]byte]cachedIdentity
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
	sum := sha256.Sum256([]byte(token))
	now := clk.Now()
	t.mu.Lock()
	if c, ok := t.cache[sum]; ok && now.Before(c.expires) && !t.NoCache {
		t.mu.Unlock()
		return c.id, nil
	}
	t.mu.Unlock()

	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{aud}}}
	if err := t.Client.Create(ctx, tr); err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, aud) {
		return Identity{}, ErrUnauthenticated
	}
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
	return id, nil
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
	// Some clients send the key in api-key (Azure style).
	return strings.TrimSpace(r.Header.Get("api-key"))
}
