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

package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// The pod's TRACEPARENT goes to the gateway on the agent API and on model
// requests, so the gateway's spans are the run's.
func TestTheRunsTraceparentIsSentToTheGateway(t *testing.T) {
	const tp = "00-5d0c3f6e9a414b6e8f2e0c1d2e3f4a5b-00f067aa0ba902b7-01"
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("traceparent")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	t.Setenv(EnvTraceparent, tp)
	cfg := ConfigFromEnv()
	cfg.GatewayURL, cfg.Token = srv.URL, "t"
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.callOnce(context.Background(), http.MethodGet, "/self", nil, nil); err != nil {
		t.Fatal(err)
	}
	c := a.OpenAI()
	_, _ = c.Models.List(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for _, path := range []string{"/agentrun/v1/self", "/v1/models"} {
		if seen[path] != tp {
			t.Errorf("%s: traceparent %q, want the pod's %q (seen %v)", path, seen[path], tp, seen)
		}
	}
}
