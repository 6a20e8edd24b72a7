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
	"fmt"
	"net/http"
)

// Attributes are what a request asks to do, in SubjectAccessReview terms.
type Attributes struct {
	Verb      string
	APIGroup  string
	Resource  string
	Namespace string
	Name      string
}

// The attributes of reading a run's events: get researchruns.
const (
	VerbGet              = "get"
	APIGroup             = "agentrun.dev"
	ResourceResearchRuns = "researchruns"
)

// String reads like `get researchruns.agentrun.dev "name" in namespace "ns"`.
func (a Attributes) String() string {
	return fmt.Sprintf("%s %s.%s %q in namespace %q", a.Verb, a.Resource, a.APIGroup, a.Name, a.Namespace)
}

// Decision is an Authorizer's answer.
type Decision struct {
	// Authenticated: the caller's identity is known (else 401).
	Authenticated bool
	// Allowed: the caller may do what Attributes ask (else 403).
	Allowed bool
	// User names the caller, for the 403 message.
	User string
	// Reason says why, when not allowed (appended to the message).
	Reason string
}

// Authorizer decides whether a request may read a run's events. The
// production one authenticates the bearer token (TokenReview) and asks a
// SubjectAccessReview for the attributes; an error (the API server
// unreachable) fails the request closed with 503.
type Authorizer interface {
	Authorize(ctx context.Context, r *http.Request, a Attributes) (Decision, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, r *http.Request, a Attributes) (Decision, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, r *http.Request, a Attributes) (Decision, error) {
	return f(ctx, r, a)
}

// AllowAll lets every request through, as user "anonymous". For tests and a
// single-user dev stack only.
var AllowAll Authorizer = AuthorizerFunc(func(context.Context, *http.Request, Attributes) (Decision, error) {
	return Decision{Authenticated: true, Allowed: true, User: "anonymous"}, nil
})
