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

package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream/sse"
)

// ListPathPattern is the runs list route (http.ServeMux syntax), beside the
// events path of package sse.
const ListPathPattern = "GET /apis/stream.agentrun.dev/v1/namespaces/{namespace}/researchruns"

// VerbList is the verb the list endpoint authorizes.
const VerbList = "list"

// ContentSecurityPolicy is sent with the page and its assets: only this
// origin's script, style and connections; no plugins, frames or base URL.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

//go:embed static
var staticFiles embed.FS

var assetTypes = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

// Options are the handler's dependencies.
type Options struct {
	// Runs lists a namespace's runs (required).
	Runs RunLister
	// Authorizer decides the list requests (required), with the attributes
	// list researchruns.agentrun.dev in the namespace.
	Authorizer sse.Authorizer
	// Events, if set, serves sse.PathPattern (an *sse.Handler), so that one
	// handler serves the page, the list and the streams.
	Events http.Handler
}

// Handler serves the page, its assets and the runs list.
type Handler struct {
	opts   Options
	mux    *http.ServeMux
	assets map[string]asset
}

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// New returns a handler; Runs and Authorizer are required.
func New(opts Options) (*Handler, error) {
	if opts.Runs == nil || opts.Authorizer == nil {
		return nil, errors.New("stream web: Runs and Authorizer are required")
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), assets: map[string]asset{}}
	for name, ct := range assetTypes {
		body, err := fs.ReadFile(staticFiles, "static/"+name)
		if err != nil {
			return nil, fmt.Errorf("stream web: embedded %s: %w", name, err)
		}
		sum := sha256.Sum256(body)
		h.assets[name] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		h.mux.HandleFunc("GET /"+name, h.serveAsset(name))
	}
	h.mux.HandleFunc("GET /{$}", h.serveAsset("index.html"))
	h.mux.HandleFunc(ListPathPattern, h.list)
	if opts.Events != nil {
		h.mux.Handle(sse.PathPattern, opts.Events)
	}
	return h, nil
}

// ServeHTTP serves the page, its assets, the list and (with Options.Events)
// the streams; anything else is 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) serveAsset(name string) http.HandlerFunc {
	a := h.assets[name]
	return func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", a.contentType)
		hd.Set("Cache-Control", "no-cache")
		hd.Set("ETag", a.etag)
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	}
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	attrs := sse.Attributes{Verb: VerbList, APIGroup: sse.APIGroup, Resource: sse.ResourceResearchRuns, Namespace: ns}
	if !h.authorize(w, r, attrs) {
		return
	}
	runs, err := h.opts.Runs.List(r.Context(), ns)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("cannot list researchruns.%s in namespace %q: %v", sse.APIGroup, ns, err))
		return
	}
	items := make([]RunSummary, len(runs))
	for i, s := range runs {
		if s.PendingApprovals == nil {
			s.PendingApprovals = []PendingApproval{}
		}
		items[i] = s
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_ = json.NewEncoder(w).Encode(RunList{Items: items})
}

// authorize answers 503, 401 or 403 as the sse handler does, and reports
// whether the request may go on.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, a sse.Attributes) bool {
	d, err := h.opts.Authorizer.Authorize(r.Context(), r, a)
	what := fmt.Sprintf("%s %s.%s in namespace %q", a.Verb, a.Resource, a.APIGroup, a.Namespace)
	switch {
	case err != nil:
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("cannot authorize %s: %v", what, err))
	case !d.Authenticated:
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", withReason(fmt.Sprintf(
			"Unauthorized: %s needs an authenticated caller (a bearer token the API server accepts)", what), d.Reason))
	case !d.Allowed:
		writeStatus(w, http.StatusForbidden, "Forbidden", withReason(fmt.Sprintf(
			"%s.%s is forbidden: User %q cannot %s resource %q in API group %q in the namespace %q",
			a.Resource, a.APIGroup, d.User, a.Verb, a.Resource, a.APIGroup, a.Namespace), d.Reason))
	default:
		return true
	}
	return false
}

func withReason(msg, reason string) string {
	if reason == "" {
		return msg
	}
	return msg + ": " + reason
}

// writeStatus writes a Kubernetes-style Status object, as package sse does.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	st := map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "reason": reason, "code": code}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}
