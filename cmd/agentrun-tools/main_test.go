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

package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/internal/toolserver"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// The binary serves http.get and a fake from its file behind a token, and
// stops on its context (SIGTERM) even with a call hanging.
func TestRunServesAndStops(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake.yaml")
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(fake, []byte("tools:\n- name: stuck\n  behavior: {hang: true}\n- name: echo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- run(ctx, []string{"--listen=127.0.0.1:0", "--allow-host=example.org,*.example.com",
			"--fake-config=" + fake, "--token-file=" + token}, &logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	base := "http://" + addr

	resp, err := http.Get(base + toolserver.PathHealthz)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_ = resp.Body.Close()

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: base + toolserver.PathMCP, HTTPClient: &http.Client{Transport: bearer("tok")}, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "echo,http.get,stuck" {
		t.Fatalf("tools %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: toolserver.ToolHTTPGet, Arguments: map[string]any{"url": "https://evil.test/"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "example.org, *.example.com") {
		t.Fatalf("http.get of a host not allowed: %v %+v", err, res)
	}

	hung := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "stuck"})
		hung <- err
	}()
	// Wait until the hanging call is under way (GET /calls), then stop.
	NewWithT(t).Eventually(func() string {
		req, _ := http.NewRequest(http.MethodGet, base+toolserver.PathCalls+"?tool=stuck", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(resp.Body)
		return body.String()
	}).WithTimeout(10 * time.Second).Should(ContainSubstring(`"inFlight":1`))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("run did not stop\n%s", logs.String())
	}
	if err := <-hung; err == nil {
		t.Fatal("the hanging call got an answer")
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--token-file=" + empty},
		{"--token-file=" + filepath.Join(dir, "missing")},
		{"--fake-config=" + filepath.Join(dir, "missing")},
		{"--http-get=false"},
		{"--allow-host=https://example.org/"},
		{"--allow-host=example.org:ssh"},
		{"--cluster-cidr=10.96.0.0"},
		{"extra"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"--listen=127.0.0.1:0"}, args...), &out, nil); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
}
