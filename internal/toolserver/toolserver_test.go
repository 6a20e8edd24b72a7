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

package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
)

// headers adds fixed headers to every request of a client.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	maps.Copy(r.Header, t.h)
	return t.next.RoundTrip(r)
}

// serve starts s on httptest and returns its base URL.
func serve(t testing.TB, opts Options) string {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		if opts.Fake != nil {
			opts.Fake.Close() // release hanging calls, so Close does not wait on them
		}
		ts.Close()
	})
	return ts.URL
}

// connect returns a go-sdk client session on base/mcp sending hdr.
func connect(t testing.TB, base string, hdr http.Header) (*mcp.ClientSession, error) {
	t.Helper()
	return connectVersion(t, base, hdr, "")
}

// connectVersion is connect asking for a protocol version ("" the newest).
func connectVersion(t testing.TB, base string, hdr http.Header, version string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "toolserver-test", Version: "v0"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:             base + PathMCP,
		HTTPClient:           &http.Client{Transport: headers{h: hdr, next: http.DefaultTransport}},
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

func mustConnect(t testing.TB, base string, hdr http.Header) *mcp.ClientSession {
	t.Helper()
	cs, err := connect(t, base, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func newFake(t *testing.T, specs ...ToolSpec) *Fake {
	t.Helper()
	f, err := NewFake(specs...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestListToolsShowsSchemas(t *testing.T) {
	g := NewWithT(t)
	schema := map[string]any{
		"type":       "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}},
		"required":   []any{"path"},
	}
	f := newFake(t,
		ToolSpec{Name: "repo.write", Description: "write a file", InputSchema: schema},
		ToolSpec{Name: "echo"})
	cs := mustConnect(t, serve(t, Options{HTTPGet: &HTTPGetOptions{}, Fake: f}), nil)

	res, err := cs.ListTools(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	byName := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	g.Expect(byName).To(HaveLen(3))
	g.Expect(byName).To(HaveKey(ToolHTTPGet))
	g.Expect(byName[ToolHTTPGet].InputSchema).To(HaveKeyWithValue("required", []any{"url"}))
	g.Expect(byName[ToolHTTPGet].Annotations.ReadOnlyHint).To(BeTrue())
	g.Expect(byName["repo.write"].Description).To(Equal("write a file"))
	g.Expect(byName["repo.write"].InputSchema).To(Equal(schema))
	g.Expect(byName["echo"].InputSchema).To(Equal(map[string]any{"type": "object"}))
}

func TestNewRefusesBadConfigurations(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Options{})
	g.Expect(err).To(MatchError(ContainSubstring("no tools")))
	_, err = New(Options{HTTPGet: &HTTPGetOptions{}, Fake: newFake(t, ToolSpec{Name: ToolHTTPGet})})
	g.Expect(err).To(MatchError(ContainSubstring("defined twice")))
	_, err = New(Options{HTTPGet: &HTTPGetOptions{AllowHosts: []string{"https://example.org/"}}})
	g.Expect(err).To(MatchError(ContainSubstring("want host, host:port, *.domain, an address or a CIDR")))
	for _, bad := range []string{"example.org:ssh", "example.org:0", "*example.org", "a.*.org", "[fd00::1]", "a:b:c"} {
		_, err = New(Options{HTTPGet: &HTTPGetOptions{AllowHosts: []string{bad}}})
		g.Expect(err).To(MatchError(ContainSubstring(`allow-host rule "`+bad+`"`)), bad)
	}

	for _, bad := range [][]ToolSpec{
		nil,
		{{Name: ""}},
		{{Name: "a b"}},
		{{Name: "x"}, {Name: "x"}},
		{{Name: "x", InputSchema: map[string]any{"type": "string"}}},
		{{Name: "x", Behavior: Behavior{Result: "a", Fail: "b"}}},
		{{Name: "x", Behavior: Behavior{Hang: true, HangFirst: 1}}},
		{{Name: "x", Behavior: Behavior{Delay: -time.Second}}},
	} {
		_, err := NewFake(bad...)
		g.Expect(err).To(HaveOccurred(), "%+v", bad)
	}
}

func TestAllowed(t *testing.T) {
	rules := []string{"example.org", "api.example.com:8443", "*.Wiki.test", " ", "10.1.0.0/16", "192.168.1.7:8080", "fd00::1"}
	for raw, want := range map[string]string{
		"https://example.org/x":          "example.org",
		"http://EXAMPLE.org/":            "example.org",
		"http://example.org:443/":        "example.org",
		"https://example.org:80/":        "example.org",
		"http://EXAMPLE.org:8080/":       "",
		"http://example.org:22/":         "",
		"http://example.org:6379/":       "",
		"https://example.org:10250/":     "",
		"https://api.example.com:8443/":  "api.example.com:8443",
		"https://api.example.com/":       "",
		"https://en.wiki.test/Raft":      "*.wiki.test",
		"https://a.b.wiki.test/":         "*.wiki.test",
		"https://a.b.wiki.test:8443/":    "",
		"https://wiki.test/":             "",
		"https://evilwiki.test/":         "",
		"https://example.org.evil.test/": "",
		"https://sub.example.org/":       "",
		"http://10.1.2.3/":               "10.1.0.0/16",
		"http://10.1.2.3:8080/":          "",
		"http://10.2.0.1/":               "",
		"http://192.168.1.7:8080/":       "192.168.1.7:8080",
		"http://192.168.1.7/":            "",
		"http://[fd00::1]/":              "fd00::1",
		"http://[::ffff:10.1.0.9]/":      "10.1.0.0/16",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := Allowed(rules, u); got != want {
			t.Errorf("Allowed(%s) = %q, want %q", raw, got, want)
		}
	}
	if got := Allowed(nil, &url.URL{Host: "example.org"}); got != "" {
		t.Errorf("an empty allowlist allowed %q", got)
	}
}

// upstream serves pages for http.get on 127.0.0.1; the resolver it returns
// resolves every host name to that address.
func upstream(t *testing.T) (Resolver, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "hello from %s", r.Host)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("a", MaxBodyBytes+100)))
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	return resolveTo(netip.MustParseAddr("127.0.0.1")), port
}

// resolveTo resolves every host name to addrs: a DNS answer, which the
// production dialer then checks.
type resolveTo netip.Addr

func (r resolveTo) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.Addr(r)}, nil
}

func TestHTTPGet(t *testing.T) {
	resolver, port := upstream(t)
	// The stand-in is on loopback: a rule names its address and port.
	cs := mustConnect(t, serve(t, Options{HTTPGet: &HTTPGetOptions{
		AllowHosts: []string{"docs.test:" + port, "*.wiki.test:" + port, "127.0.0.1:" + port},
		Resolver:   resolver,
	}}), nil)
	get := func(u string) *mcp.CallToolResult { return call(t, cs, ToolHTTPGet, map[string]any{"url": u}) }
	base := func(host string) string { return "http://" + host + ":" + port }

	t.Run("allowed host", func(t *testing.T) {
		res := get(base("docs.test") + "/page")
		if res.IsError || text(res) != "HTTP 200\nhello from docs.test:"+port {
			t.Fatalf("got %v %q", res.IsError, text(res))
		}
	})
	t.Run("allowed subdomain", func(t *testing.T) {
		res := get(base("en.wiki.test") + "/page")
		if res.IsError || !strings.HasSuffix(text(res), "hello from en.wiki.test:"+port) {
			t.Fatalf("got %v %q", res.IsError, text(res))
		}
	})
	t.Run("body is bounded", func(t *testing.T) {
		res := get(base("docs.test") + "/big")
		status, body, _ := strings.Cut(text(res), "\n")
		if res.IsError || status != "HTTP 200 (body truncated to 64 KiB)" || len(body) != MaxBodyBytes {
			t.Fatalf("got %v %q and %d bytes", res.IsError, status, len(body))
		}
	})
	for name, tc := range map[string]struct{ url, want string }{
		"host not allowed":  {base("evil.test") + "/page", "evil.test:" + port + " is not allowed; allowed: docs.test:" + port + ", *.wiki.test:" + port},
		"apex of wildcard":  {base("wiki.test") + "/page", "is not allowed"},
		"not http":          {"ftp://docs.test/x", `needs an absolute http(s) URL, not "ftp://docs.test/x"`},
		"relative":          {"/page", "needs an absolute http(s) URL"},
		"redirect away":     {base("docs.test") + "/away?to=" + url.QueryEscape(base("evil.test")+"/page"), "redirect to evil.test:" + port},
		"upstream 404":      {base("docs.test") + "/missing", "404 Not Found"},
		"redirect internal": {base("docs.test") + "/away?to=/missing", "404 Not Found"},
	} {
		t.Run(name, func(t *testing.T) {
			res := get(tc.url)
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Fatalf("got IsError=%v %q, want an error containing %q", res.IsError, text(res), tc.want)
			}
		})
	}
	t.Run("no url", func(t *testing.T) {
		res := call(t, cs, ToolHTTPGet, map[string]any{})
		if !res.IsError {
			t.Fatalf("got %q", text(res))
		}
	})
}

func TestHTTPGetEmptyAllowlistNamesTheRule(t *testing.T) {
	cs := mustConnect(t, serve(t, Options{HTTPGet: &HTTPGetOptions{}}), nil)
	res := call(t, cs, ToolHTTPGet, map[string]any{"url": "https://example.org/"})
	if !res.IsError || !strings.Contains(text(res), "the allowlist is empty") {
		t.Fatalf("got %v %q", res.IsError, text(res))
	}
}

func TestFakeBehaviors(t *testing.T) {
	f := newFake(t,
		ToolSpec{Name: "echo"},
		ToolSpec{Name: "fixed", Behavior: Behavior{Result: "done"}},
		ToolSpec{Name: "broken", Behavior: Behavior{Fail: "the disk is full"}},
		ToolSpec{Name: "slow", Behavior: Behavior{Delay: 100 * time.Millisecond, Result: "late"}},
		ToolSpec{Name: "stuck", Behavior: Behavior{Hang: true}},
		ToolSpec{Name: "flaky", Behavior: Behavior{HangFirst: 2, Result: "third time lucky"}},
	)
	cs := mustConnect(t, serve(t, Options{Fake: f}), nil)

	t.Run("echo answers the canonical arguments", func(t *testing.T) {
		res := call(t, cs, "echo", map[string]any{"b": 1.5, "a": []any{"x", map[string]any{"z": true, "y": nil}}})
		if res.IsError || text(res) != `{"a":["x",{"y":null,"z":true}],"b":1.5}` {
			t.Fatalf("got %v %q", res.IsError, text(res))
		}
		if res := call(t, cs, "echo", nil); text(res) != "{}" {
			t.Fatalf("no arguments echo %q", text(res))
		}
	})
	t.Run("fixed result", func(t *testing.T) {
		if res := call(t, cs, "fixed", map[string]any{"x": 1}); res.IsError || text(res) != "done" {
			t.Fatalf("got %v %q", res.IsError, text(res))
		}
	})
	t.Run("fail is a tool error", func(t *testing.T) {
		if res := call(t, cs, "broken", nil); !res.IsError || text(res) != "the disk is full" {
			t.Fatalf("got %v %q", res.IsError, text(res))
		}
	})
	t.Run("delay", func(t *testing.T) {
		start := time.Now()
		res := call(t, cs, "slow", nil)
		if took := time.Since(start); took < 100*time.Millisecond || text(res) != "late" {
			t.Fatalf("answered %q after %s", text(res), took)
		}
		// A client that gives up first gets no answer.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow"}); err == nil {
			t.Fatal("a call shorter than the delay got an answer")
		}
	})
	t.Run("hang until the client times out", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "stuck", Arguments: map[string]any{"n": 1}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the client's deadline", err)
		}
		if took := time.Since(start); took < 150*time.Millisecond {
			t.Fatalf("returned after %s", took)
		}
		if n := f.Count("stuck"); n != 1 {
			t.Fatalf("stuck dispatched %d times", n)
		}
		// The server's side of the call ends with the client's request.
		NewWithT(t).Eventually(f.InFlight).Should(BeZero())
	})
	t.Run("hang the first N calls", func(t *testing.T) {
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "flaky"})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: got %v, want a timeout", i+1, err)
			}
		}
		if res := call(t, cs, "flaky", nil); res.IsError || text(res) != "third time lucky" {
			t.Fatalf("third call: %v %q", res.IsError, text(res))
		}
		if n := f.Count("flaky"); n != 3 {
			t.Fatalf("flaky dispatched %d times", n)
		}
	})
}

// A call's handler ends when the client's request does, whatever the
// protocol version (2026-07-28 ties the handler to the request; older
// versions cancel with a notification a stateless server cannot route).
func TestHangEndsWithTheRequest(t *testing.T) {
	for _, version := range []string{"", "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run("version "+version, func(t *testing.T) {
			g := NewWithT(t)
			f := newFake(t, ToolSpec{Name: "stuck", Behavior: Behavior{Hang: true}},
				ToolSpec{Name: "slow", Behavior: Behavior{Delay: time.Hour}})
			cs, err := connectVersion(t, serve(t, Options{Fake: f}), nil, version)
			g.Expect(err).NotTo(HaveOccurred())
			if version != "" {
				g.Expect(cs.InitializeResult().ProtocolVersion).To(Equal(version))
			}
			for _, tool := range []string{"stuck", "slow"} {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
				cancel()
				g.Expect(err).To(MatchError(context.DeadlineExceeded))
				g.Eventually(f.InFlight).Should(BeZero(), tool)
			}
		})
	}
}

func TestFakeCloseEndsHangingCalls(t *testing.T) {
	g := NewWithT(t)
	f := newFake(t, ToolSpec{Name: "stuck", Behavior: Behavior{Hang: true}})
	cs := mustConnect(t, serve(t, Options{Fake: f}), nil)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "stuck"})
		done <- err
	}()
	g.Eventually(func() int { return f.Count("stuck") }).Should(Equal(1))
	g.Expect(f.InFlight()).To(Equal(1))
	f.Close()
	g.Eventually(done).Should(Receive(MatchError(ContainSubstring("shutting down"))))
}

func TestFakeRecordsCalls(t *testing.T) {
	g := NewWithT(t)
	f := newFake(t, ToolSpec{Name: "repo.write"}, ToolSpec{Name: "notes.add"})
	base := serve(t, Options{Fake: f})
	cs := mustConnect(t, base, http.Header{
		"Authorization":      {"Bearer abc"},
		HeaderIdempotencyKey: {"idem-header"},
	})
	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Name:      "repo.write",
		Arguments: map[string]any{"path": "a.txt", "content": "x"},
		Meta:      mcp.Meta{MetaIdempotencyKey: "idem-meta"},
	})
	g.Expect(err).NotTo(HaveOccurred())
	_ = call(t, cs, "notes.add", map[string]any{"text": "hi"})

	calls := f.Calls()
	g.Expect(calls).To(HaveLen(2))
	c := calls[0]
	g.Expect(c.Seq).To(BeEquivalentTo(1))
	g.Expect(c.Tool).To(Equal("repo.write"))
	g.Expect(string(c.Arguments)).To(Equal(`{"content":"x","path":"a.txt"}`))
	g.Expect(c.Authorization).To(Equal("Bearer abc"))
	g.Expect(c.MetaIdempotencyKey).To(Equal("idem-meta"))
	g.Expect(c.HeaderIdempotencyKey).To(Equal("idem-header"))
	g.Expect(c.IdempotencyKey).To(Equal("idem-meta"))
	g.Expect(c.Time).NotTo(BeZero())
	g.Expect(calls[1].Tool).To(Equal("notes.add"))
	g.Expect(calls[1].MetaIdempotencyKey).To(BeEmpty())
	g.Expect(calls[1].IdempotencyKey).To(Equal("idem-header"))
	g.Expect(f.Count("repo.write")).To(Equal(1))
	g.Expect(f.Count("")).To(Equal(2))
	g.Expect(f.Count("nothing")).To(Equal(0))

	// GET /calls, for a test in another process.
	rep := getCalls(t, base+PathCalls, "")
	g.Expect(rep.Total).To(Equal(2))
	g.Expect(rep.Counts).To(Equal(map[string]int{"repo.write": 1, "notes.add": 1}))
	g.Expect(rep.Calls).To(HaveLen(2))
	g.Expect(rep.Calls[0].MetaIdempotencyKey).To(Equal("idem-meta"))
	g.Expect(string(rep.Calls[0].Arguments)).To(Equal(`{"content":"x","path":"a.txt"}`))
	rep = getCalls(t, base+PathCalls+"?tool=notes.add", "")
	g.Expect(rep.Total).To(Equal(1))
	g.Expect(rep.Calls).To(HaveLen(1))
	g.Expect(rep.Calls[0].Tool).To(Equal("notes.add"))

	// DELETE /calls forgets them.
	req, _ := http.NewRequest(http.MethodDelete, base+PathCalls, nil)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))
	g.Expect(f.Calls()).To(BeEmpty())
	g.Expect(f.Count("")).To(Equal(0))
}

func getCalls(t *testing.T, u, token string) CallsReport {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", u, resp.Status, body)
	}
	var rep CallsReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestFakeKeepsTheLastCalls(t *testing.T) {
	f := newFake(t, ToolSpec{Name: "a"}, ToolSpec{Name: "b"})
	for i := range MaxRecordedCalls + 5 {
		tool := "a"
		if i%2 == 1 {
			tool = "b"
		}
		f.record(Call{Tool: tool, Arguments: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	calls := f.Calls()
	if len(calls) != MaxRecordedCalls {
		t.Fatalf("kept %d calls", len(calls))
	}
	if calls[0].Seq != 6 || calls[len(calls)-1].Seq != MaxRecordedCalls+5 {
		t.Fatalf("kept calls %d to %d", calls[0].Seq, calls[len(calls)-1].Seq)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i].Seq != calls[i-1].Seq+1 {
			t.Fatalf("calls out of order at %d: %d after %d", i, calls[i].Seq, calls[i-1].Seq)
		}
	}
	if f.Count("a")+f.Count("b") != MaxRecordedCalls+5 || f.Count("") != MaxRecordedCalls+5 {
		t.Fatalf("counts a=%d b=%d all=%d", f.Count("a"), f.Count("b"), f.Count(""))
	}
}

func TestBearerTokenRequired(t *testing.T) {
	g := NewWithT(t)
	f := newFake(t, ToolSpec{Name: "echo"})
	base := serve(t, Options{Fake: f, Token: "s3cret"})

	_, err := connect(t, base, nil)
	g.Expect(err).To(HaveOccurred())
	_, err = connect(t, base, http.Header{"Authorization": {"Bearer wrong"}})
	g.Expect(err).To(HaveOccurred())

	for _, auth := range []string{"", "Bearer wrong", "s3cret"} {
		req, _ := http.NewRequest(http.MethodPost, base+PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "Authorization %q", auth)
		g.Expect(resp.Header.Get("WWW-Authenticate")).To(HavePrefix("Bearer"))
	}
	resp, err := http.Get(base + PathCalls)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	g.Expect(f.Count("")).To(Equal(0))

	// Health needs no token.
	resp, err = http.Get(base + PathHealthz)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))

	cs := mustConnect(t, base, http.Header{"Authorization": {"Bearer s3cret"}})
	res := call(t, cs, "echo", map[string]any{"k": "v"})
	g.Expect(text(res)).To(Equal(`{"k":"v"}`))
	g.Expect(f.Calls()[0].Authorization).To(Equal("Bearer s3cret"))
	g.Expect(getCalls(t, base+PathCalls, "s3cret").Total).To(Equal(1))
}

func TestLoadFakeConfig(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(body), 0o600)).To(Succeed())
		return p
	}
	cfg, err := LoadFakeConfig(write("fake.yaml", `
tools:
- name: repo.write
  description: Write a file.
  inputSchema:
    type: object
    properties: {path: {type: string}}
  behavior: {delay: 250ms, result: written}
- name: deploy
  behavior: {hangFirst: 2}
- name: broken
  behavior: {fail: nope}
- name: echo
`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Tools).To(HaveLen(4))
	g.Expect(cfg.Tools[0].Behavior).To(Equal(Behavior{Delay: 250 * time.Millisecond, Result: "written"}))
	g.Expect(cfg.Tools[0].InputSchema).To(HaveKeyWithValue("type", "object"))
	g.Expect(cfg.Tools[1].Behavior).To(Equal(Behavior{HangFirst: 2}))
	g.Expect(cfg.Tools[2].Behavior).To(Equal(Behavior{Fail: "nope"}))
	g.Expect(cfg.Tools[3].Behavior).To(Equal(Behavior{}))
	_, err = NewFake(cfg.Tools...)
	g.Expect(err).NotTo(HaveOccurred())

	// JSON, and a round trip.
	data, err := json.Marshal(FakeConfig{Tools: []ToolSpec{{Name: "x", Behavior: Behavior{Delay: 2 * time.Second, Hang: true}}}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal(`{"tools":[{"name":"x","behavior":{"delay":"2s","hang":true}}]}`))
	cfg, err = LoadFakeConfig(write("fake.json", string(data)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Tools[0].Behavior).To(Equal(Behavior{Delay: 2 * time.Second, Hang: true}))

	_, err = LoadFakeConfig(write("typo.yaml", "tools: [{name: x, behaviour: {hang: true}}]"))
	g.Expect(err).To(HaveOccurred())
	_, err = LoadFakeConfig(write("typo2.yaml", "tools: [{name: x, behavior: {hang_first: 1}}]"))
	g.Expect(err).To(HaveOccurred())
	_, err = LoadFakeConfig(write("delay.yaml", "tools: [{name: x, behavior: {delay: soon}}]"))
	g.Expect(err).To(MatchError(ContainSubstring("behavior.delay")))
}
