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
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrun-dev/agentrun/internal/stream/sse"
)

func TestAssets(t *testing.T) {
	h, err := New(Options{Runs: RunListerFunc(noRuns), Authorizer: sse.AllowAll})
	if err != nil {
		t.Fatal(err)
	}
	for path, ct := range map[string]string{
		"/":           "text/html; charset=utf-8",
		"/index.html": "text/html; charset=utf-8",
		"/app.js":     "text/javascript; charset=utf-8",
		"/style.css":  "text/css; charset=utf-8",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, rec.Code)
		}
		hd := rec.Header()
		if got := hd.Get("Content-Type"); got != ct {
			t.Errorf("GET %s: Content-Type %q, want %q", path, got, ct)
		}
		if got := hd.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q", path, got)
		}
		if got := hd.Get("Content-Security-Policy"); !strings.HasPrefix(got, "default-src 'self';") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, got)
		}
		// no-cache revalidates: the ETag answers 304.
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("If-None-Match", hd.Get("ETag"))
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/other.js", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /other.js: %d, want 404", rec.Code)
	}
}

// The page loads nothing from anywhere but its own origin.
func TestPageFetchesNothingElsewhere(t *testing.T) {
	err := fs.WalkDir(staticFiles, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(staticFiles, path)
		if err != nil {
			return err
		}
		for _, s := range []string{"http://", "https://", "//cdn", "@import", "document.cookie"} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s contains %q", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func noRuns(context.Context, string) ([]RunSummary, error) { return nil, nil }

func TestList(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var gotAttrs sse.Attributes
	h, err := New(Options{
		Runs: RunListerFunc(func(_ context.Context, ns string) ([]RunSummary, error) {
			switch ns {
			case "broken":
				return nil, errors.New("cache not synced")
			case "empty":
				return nil, nil
			}
			return []RunSummary{{Name: "a", Namespace: ns, Phase: "Running", Created: created, Steps: 2,
				Budget: Budget{ModelRequests: Count{Used: 1, Granted: 10}}}}, nil
		}),
		Authorizer: sse.AuthorizerFunc(func(_ context.Context, r *http.Request, a sse.Attributes) (sse.Decision, error) {
			gotAttrs = a
			switch {
			case a.Namespace == "down":
				return sse.Decision{}, errors.New("apiserver unreachable")
			case r.Header.Get("Authorization") == "":
				return sse.Decision{}, nil
			case a.Namespace == "locked":
				return sse.Decision{Authenticated: true, User: "alice", Reason: "no RBAC rule"}, nil
			}
			return sse.Decision{Authenticated: true, Allowed: true, User: "alice"}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	get := func(ns string, token bool) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/apis/stream.agentrun.dev/v1/namespaces/"+ns+"/researchruns", nil)
		if token {
			req.Header.Set("Authorization", "Bearer t")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", ns, ct)
		}
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, strings.TrimSpace(string(b))
	}

	code, body := get("team-a", true)
	want := `{"items":[{"name":"a","namespace":"team-a","phase":"Running","reason":"","message":"","session":"",` +
		`"created":"2026-03-01T12:00:00Z","steps":2,"budget":{"modelRequests":{"used":1,"granted":10},` +
		`"toolCalls":{"used":0,"granted":0},"tokens":{"used":0,"granted":0}},"pendingApprovals":[]}]}`
	if code != http.StatusOK || body != want {
		t.Errorf("team-a: %d %s\nwant %s", code, body, want)
	}
	if diff := cmp.Diff(sse.Attributes{Verb: "list", APIGroup: "agentrun.dev", Resource: "researchruns", Namespace: "team-a"}, gotAttrs); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if code, body = get("empty", true); code != http.StatusOK || body != `{"items":[]}` {
		t.Errorf("empty: %d %s", code, body)
	}

	for _, tc := range []struct {
		ns     string
		token  bool
		code   int
		reason string
		msg    string
	}{
		{"team-a", false, 401, "Unauthorized", `Unauthorized: list researchruns.agentrun.dev in namespace "team-a" needs an authenticated caller (a bearer token the API server accepts)`},
		{"locked", true, 403, "Forbidden", `researchruns.agentrun.dev is forbidden: User "alice" cannot list resource "researchruns" in API group "agentrun.dev" in the namespace "locked": no RBAC rule`},
		{"down", true, 503, "ServiceUnavailable", `cannot authorize list researchruns.agentrun.dev in namespace "down": apiserver unreachable`},
		{"broken", true, 503, "ServiceUnavailable", `cannot list researchruns.agentrun.dev in namespace "broken": cache not synced`},
	} {
		code, body := get(tc.ns, tc.token)
		var st map[string]any
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("%s: %v: %s", tc.ns, err, body)
		}
		want := map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"reason": tc.reason, "code": float64(tc.code), "message": tc.msg}
		if code != tc.code {
			t.Errorf("%s: HTTP %d, want %d", tc.ns, code, tc.code)
		}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("%s: Status (-want +got):\n%s", tc.ns, diff)
		}
	}
}

func TestNewRequiresRunsAndAuthorizer(t *testing.T) {
	if _, err := New(Options{Authorizer: sse.AllowAll}); err == nil {
		t.Error("New without Runs: no error")
	}
	if _, err := New(Options{Runs: RunListerFunc(noRuns)}); err == nil {
		t.Error("New without Authorizer: no error")
	}
}
