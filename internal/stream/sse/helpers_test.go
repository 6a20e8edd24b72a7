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
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

var runA = stream.RunKey{Namespace: "team-a", Name: "survey.v2", UID: "uid-survey-v2"}

type fixture struct {
	t     testing.TB
	store *store.Store
	h     *Handler
	srv   *httptest.Server

	mu        sync.Mutex
	snapAt    []uint64
	exists    map[stream.RunKey]bool
	authorize AuthorizerFunc
}

func newFixture(t testing.TB, cfg store.Config, opts Options) *fixture {
	t.Helper()
	if cfg.Dir == "" && cfg.URL == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	f := &fixture{t: t, store: s, exists: map[stream.RunKey]bool{runA: true}}
	opts.Source = s
	if opts.Authorizer == nil {
		opts.Authorizer = AuthorizerFunc(func(ctx context.Context, r *http.Request, a Attributes) (Decision, error) {
			f.mu.Lock()
			fn := f.authorize
			f.mu.Unlock()
			if fn != nil {
				return fn(ctx, r, a)
			}
			return AllowAll.Authorize(ctx, r, a)
		})
	}
	opts.RunUID = func(_ context.Context, run stream.RunKey) (string, bool, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for k, ok := range f.exists {
			if ok && k.Namespace == run.Namespace && k.Name == run.Name {
				return k.UID, true, nil
			}
		}
		return "", false, nil
	}
	if opts.Snapshot == nil {
		opts.Snapshot = func(_ context.Context, _ stream.RunKey, last uint64) (json.RawMessage, error) {
			f.mu.Lock()
			f.snapAt = append(f.snapAt, last)
			f.mu.Unlock()
			return json.RawMessage(fmt.Sprintf(`{"phase":"Running","through":%d}`, last)), nil
		}
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	f.srv = httptest.NewUnstartedServer(h)
	f.srv.Listener = smallBufferListener{f.srv.Listener}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// smallBufferListener shrinks each connection's send buffer, so that a
// client that stops reading pushes back on the server quickly.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

func (f *fixture) publish(run stream.RunKey, ev stream.Event) uint64 {
	f.t.Helper()
	seq, err := f.store.Publish(context.Background(), run, ev)
	if err != nil {
		f.t.Fatal(err)
	}
	return seq
}

func (f *fixture) url(run stream.RunKey, query string) string {
	u := f.srv.URL + Path(run)
	if query != "" {
		u += "?" + query
	}
	return u
}

// get opens the stream; header may set Last-Event-ID.
func (f *fixture) get(ctx context.Context, url string, header map[string]string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// sseMsg is one parsed SSE message.
type sseMsg struct {
	id, event string
	hasID     bool
	data      string
	ev        stream.Event
}

type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(body io.Reader) *sseReader { return &sseReader{r: bufio.NewReader(body)} }

// next returns the next message, skipping comments.
func (s *sseReader) next() (sseMsg, error) {
	var m sseMsg
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return m, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if m.event == "" && m.data == "" {
				continue
			}
			if err := json.Unmarshal([]byte(m.data), &m.ev); err != nil {
				return m, fmt.Errorf("data %q: %w", m.data, err)
			}
			return m, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			m.id, m.hasID = line[4:], true
		case strings.HasPrefix(line, "event: "):
			m.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			m.data = line[6:]
		}
	}
}

func readMsgs(t testing.TB, rd *sseReader, n int) []sseMsg {
	t.Helper()
	var out []sseMsg
	for len(out) < n {
		m, err := rd.next()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

func msgSeqs(ms []sseMsg) []uint64 {
	out := make([]uint64, 0, len(ms))
	for _, m := range ms {
		n, _ := strconv.ParseUint(m.id, 10, 64)
		out = append(out, n)
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func step(i int) stream.Event {
	return stream.Event{Type: stream.StepStarted, StepName: fmt.Sprintf("step-%d", i)}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func readStatus(t testing.TB, resp *http.Response) map[string]any {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
