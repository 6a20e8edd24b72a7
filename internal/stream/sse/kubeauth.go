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

package sse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// DefaultAudience is the audience a reader's token must be issued for by
// default (`kubectl create token NAME --audience agentrun-stream`): a
// token minted for the API server, or for the gateway, is refused, so the
// stream server never accepts (and could never replay) a credential that
// works elsewhere.
const DefaultAudience = "agentrun-stream"

// Defaults of KubeAuthOptions.
const (
	DefaultAuthnCacheTTL   = 10 * time.Second
	DefaultAllowedCacheTTL = 10 * time.Second
	DefaultDeniedCacheTTL  = 10 * time.Second
	DefaultReviewTimeout   = 10 * time.Second
)

// KubeAuthOptions configure NewKubeAuthorizer. Zero values take the
// defaults.
type KubeAuthOptions struct {
	// Audiences the caller's token must be issued for (TokenReview
	// spec.audiences). Empty: DefaultAudience. A token of the API server's
	// own audience (kubectl's, `kubectl create token NAME` without
	// --audience) is accepted only if one of these is among the API
	// server's --api-audiences.
	Audiences []string

	// AuthnCacheTTL is how long a TokenReview's answer for a token is reused
	// (default 10 s): a revoked token keeps working at most this long.
	AuthnCacheTTL time.Duration
	// AllowedCacheTTL is how long an allowed SubjectAccessReview is reused
	// for the same user and attributes (default 10 s): a removed
	// RoleBinding still lets a new connection in for at most this long. An
	// open stream is not re-checked.
	AllowedCacheTTL time.Duration
	// DeniedCacheTTL is how long a denied SubjectAccessReview is reused
	// (default 10 s): a new RoleBinding takes effect within this long.
	DeniedCacheTTL time.Duration

	// Timeout bounds each review request (default 10 s).
	Timeout time.Duration
	// RetryBackoff retries a review whose request failed (connection
	// refused, 5xx, 429) before the caller is answered 503. Default: 500 ms
	// growing ×1.5, 5 attempts (kube-apiserver's own for delegated auth).
	RetryBackoff *wait.Backoff
}

// NewKubeAuthorizer returns the production Authorizer: it authenticates the
// caller's `Authorization: Bearer` token with a TokenReview and asks a
// SubjectAccessReview whether that user may do the request's Attributes,
// with k8s.io/apiserver's delegating authenticator and authorizer (the ones
// an aggregated API server uses), both cached.
//
// Only the Authorization header is read: no query parameter, no cookie, no
// WebSocket protocol, no client certificate; anonymous requests are not
// authenticated.
//
// Decisions: no token, or one the API server rejects (invalid, expired,
// another audience) → not Authenticated (401); a user the
// SubjectAccessReview does not allow → not Allowed, with User and the
// review's Reason (403); a review that cannot be made (the API server
// unreachable or failing, or refusing cfg's identity the review itself) →
// an error (503, fail closed).
//
// cfg's identity needs `create` on tokenreviews.authentication.k8s.io and
// subjectaccessreviews.authorization.k8s.io (ClusterRole
// system:auth-delegator grants both).
func NewKubeAuthorizer(cfg *rest.Config, opts KubeAuthOptions) (Authorizer, error) {
	if cfg == nil {
		return nil, errors.New("stream sse: NewKubeAuthorizer needs a rest.Config")
	}
	opts = opts.withDefaults()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("stream sse: http client: %w", err)
	}
	authnClient, err := authenticationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("stream sse: authentication client: %w", err)
	}
	authzClient, err := authorizationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("stream sse: authorization client: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:  authnClient,
		TokenAccessReviewTimeout: opts.Timeout,
		WebhookRetryBackoff:      opts.RetryBackoff,
		CacheTTL:                 opts.AuthnCacheTTL,
		APIAudiences:             authenticator.Audiences(opts.Audiences),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("stream sse: delegating authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient,
		AllowCacheTTL:             opts.AllowedCacheTTL,
		DenyCacheTTL:              opts.DeniedCacheTTL,
		WebhookRetryBackoff:       opts.RetryBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("stream sse: delegating authorizer: %w", err)
	}
	return &kubeAuthorizer{authn: authn, authz: authz, audiences: opts.Audiences}, nil
}

func (o KubeAuthOptions) withDefaults() KubeAuthOptions {
	if len(o.Audiences) == 0 {
		o.Audiences = []string{DefaultAudience}
	}
	if o.AuthnCacheTTL <= 0 {
		o.AuthnCacheTTL = DefaultAuthnCacheTTL
	}
	if o.AllowedCacheTTL <= 0 {
		o.AllowedCacheTTL = DefaultAllowedCacheTTL
	}
	if o.DeniedCacheTTL <= 0 {
		o.DeniedCacheTTL = DefaultDeniedCacheTTL
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultReviewTimeout
	}
	if o.RetryBackoff == nil {
		o.RetryBackoff = &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	}
	return o
}

type kubeAuthorizer struct {
	authn     authenticator.Request
	authz     authorizer.Authorizer
	audiences []string
}

func (k *kubeAuthorizer) Authorize(ctx context.Context, r *http.Request, a Attributes) (Decision, error) {
	header := r.Header.Get("Authorization")
	// The authenticator sees the Authorization header alone (and removes it
	// from the request it is given once the token is accepted): the caller's
	// request is neither read for other credentials nor changed.
	req := (&http.Request{Header: http.Header{}}).WithContext(ctx)
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	if len(k.audiences) > 0 {
		req = req.WithContext(authenticator.WithAudiences(ctx, k.audiences))
	}
	resp, ok, err := k.authn.AuthenticateRequest(req)
	switch {
	case err != nil && reviewFailed(err):
		if ctx.Err() != nil {
			return Decision{}, ctx.Err()
		}
		return Decision{}, fmt.Errorf("TokenReview: %s", redact(err.Error(), header))
	case !ok || resp == nil || resp.User == nil:
		reason := "no bearer token (Authorization: Bearer <token>)"
		if err != nil {
			reason = "the API server did not accept the bearer token: " + redact(err.Error(), header)
		}
		if len(k.audiences) > 0 {
			reason += fmt.Sprintf("; this server accepts tokens issued for audience %q only "+
				"(kubectl create token NAME --audience %s)", strings.Join(k.audiences, `" or "`), k.audiences[0])
		}
		return Decision{Reason: reason}, nil
	}
	u := resp.User
	dec, reason, err := k.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            u,
		Verb:            a.Verb,
		APIGroup:        a.APIGroup,
		Resource:        a.Resource,
		Namespace:       a.Namespace,
		Name:            a.Name,
		ResourceRequest: true,
	})
	d := Decision{Authenticated: true, User: u.GetName()}
	if err != nil {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		return d, fmt.Errorf("SubjectAccessReview for %q: %w", u.GetName(), err)
	}
	if dec == authorizer.DecisionAllow {
		d.Allowed = true
		return d, nil
	}
	d.Reason = redact(reason, header)
	return d, nil
}

// reviewFailed says whether an authentication error means the TokenReview
// could not be made — the request failed, timed out or was refused (an API
// status: the review itself failed; a rejected token is a successful review
// saying "not authenticated", whose error is plain text) — as opposed to a
// token the API server reviewed and rejected.
func reviewFailed(err error) bool {
	if agg, ok := errors.AsType[utilerrors.Aggregate](err); ok {
		return slices.ContainsFunc(agg.Errors(), reviewFailed)
	}
	var status apierrors.APIStatus
	_, network := errors.AsType[net.Error](err)
	return errors.As(err, &status) || network ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		// The retry loop's own failure (e.g. its context ended before the
		// first attempt) comes as text.
		strings.HasPrefix(err.Error(), "webhook call failed")
}

// redact removes the caller's token from a message that goes back to it or
// to a log.
func redact(msg, authorizationHeader string) string {
	_, token, ok := strings.Cut(strings.TrimSpace(authorizationHeader), " ")
	if token = strings.TrimSpace(token); ok && len(token) >= 8 {
		msg = strings.ReplaceAll(msg, token, "<redacted>")
	}
	return msg
}
