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

package kubectlplugin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeStream serves one run's stream as docs/stream.md describes
// agentrun-stream's: the JSON-lines export, and SSE with Last-Event-ID
// resume. Its SSE connections can be cut: dropAfter[i] ends connection i
// abruptly after that seq (in the middle of the next event), reconnectAt[i]
// ends it with the server's reconnect event.
type fakeStream struct {
	t      *testing.T
	path   string
	token  string
	events [][]byte
	oldest uint64

	mu          sync.Mutex
	conns       int
	dropAfter   map[int]uint64
	reconnectAt map[int]uint64
	asked       []string // "Last-Event-ID: N" per SSE connection
	auth        []string // the Authorization header of each request
}

func newFakeStream(t *testing.T, ns, run string) *fakeStream {
	t.Helper()
	data, err := os.ReadFile("testdata/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeStream{t: t, path: EventsPath(ns, run), oldest: 1, dropAfter: map[int]uint64{},
		reconnectAt: map[int]uint64{}}
	for line := range bytes.Lines(data) {
		f.events = append(f.events, bytes.TrimSpace(line))
	}
	return f
}

func (f *fakeStream) status(w http.ResponseWriter, code int, reason, msg string, details map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"reason": reason, "code": code, "message": msg, "details": details})
}

func (f *fakeStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		f.status(w, 401, "Unauthorized", `Unauthorized: get researchruns.agentrun.dev "survey-vector-dbs" in namespace `+
			`"team-a" needs an authenticated caller: no bearer token (Authorization: Bearer <token>)`, nil)
		return
	}
	if r.URL.Path != f.path {
		f.status(w, 404, "NotFound", "researchruns.agentrun.dev not found", nil)
		return
	}
	last := uint64(len(f.events))
	w.Header().Set("X-Agentrun-Oldest-Seq", strconv.FormatUint(f.oldest, 10))
	w.Header().Set("X-Agentrun-Last-Seq", strconv.FormatUint(last, 10))
	if r.URL.Query().Get("format") == "jsonl" {
		w.Header().Set("Content-Type", "application/jsonl")
		for _, ev := range f.events[f.oldest-1:] {
			_, _ = w.Write(append(ev, '\n'))
		}
		return
	}
	lei := r.Header.Get("Last-Event-ID")
	f.mu.Lock()
	conn := f.conns
	f.conns++
	f.asked = append(f.asked, "Last-Event-ID: "+lei)
	drop, reconnect := f.dropAfter[conn], f.reconnectAt[conn]
	f.mu.Unlock()
	after, err := strconv.ParseUint(lei, 10, 64)
	if err != nil {
		f.status(w, 400, "BadRequest", "this fake serves only resumed streams", nil)
		return
	}
	if after+1 < f.oldest || after > last {
		f.status(w, 410, "Expired", fmt.Sprintf("Last-Event-ID %d is older than the retention of team-a/survey-vector-dbs: "+
			"the oldest available event is %d", after, f.oldest), map[string]any{"oldestSeq": f.oldest, "lastSeq": last})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flush := func() { _ = bw.Flush(); w.(http.Flusher).Flush() }
	_, _ = fmt.Fprintf(bw, ": agentrun run stream team-a/survey-vector-dbs\n\n")
	for seq := after + 1; seq <= last; seq++ {
		ev := f.events[seq-1]
		var e struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(ev, &e)
		if drop > 0 && seq == drop+1 {
			// Half an event, then the connection is gone.
			_, _ = fmt.Fprintf(bw, "id: %d\nevent: %s\ndata: %s", seq, e.Type, ev[:len(ev)/2])
			flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		if reconnect > 0 && seq == reconnect+1 {
			_, _ = fmt.Fprintf(bw, "event: CUSTOM\ndata: {\"type\":\"CUSTOM\",\"run\":\"team-a/survey-vector-dbs\","+
				"\"name\":\"agentrun.dev/reconnect\",\"value\":{\"reason\":\"SlowConsumer\","+
				"\"lastEventId\":\"%d\"}}\n\n", reconnect)
			flush()
			return
		}
		_, _ = fmt.Fprintf(bw, "id: %d\nevent: %s\ndata: %s\n\n", seq, e.Type, ev)
		if seq%5 == 0 {
			_, _ = fmt.Fprintf(bw, ": keepalive\n\n")
		}
		flush()
	}
	<-r.Context().Done() // a live stream stays open; the client leaves after RUN_FINISHED
}

func TestEventsExport(t *testing.T) {
	f := newFakeStream(t, "team-a", "survey-vector-dbs")
	srv := httptest.NewServer(f)
	defer srv.Close()
	out, _, err := run(t, time.Now(), nil, "events", "-n", "team-a", "survey-vector-dbs", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "events.txt", out)

	out, _, err = run(t, time.Now(), nil, "events", "-n", "team-a", "survey-vector-dbs", "--server", srv.URL,
		"-o", "jsonl", "--from", "20")
	if err != nil {
		t.Fatal(err)
	}
	want := string(f.events[19]) + "\n" + string(f.events[20]) + "\n"
	if out != want {
		t.Errorf("-o jsonl --from 20: got\n%s\nwant\n%s", out, want)
	}
}

// TestEventsFollowResumes cuts the first connection in the middle of event
// 10 and ends the second with the server's reconnect event after 15: the
// client resumes each time with Last-Event-ID of the last event it got,
// prints every event once, in order, and leaves after RUN_FINISHED.
func TestEventsFollowResumes(t *testing.T) {
	f := newFakeStream(t, "team-a", "survey-vector-dbs")
	f.token = "viewer-token"
	f.dropAfter[0] = 9
	f.reconnectAt[1] = 15
	srv := httptest.NewServer(f)
	defer srv.Close()
	// The web page's URL, as make dev prints it: its fragment holds the token.
	page := srv.URL + "/?namespace=team-a#token=viewer-token"
	out, errOut, err := run(t, time.Now(), nil, "events", "-n", "team-a", "survey-vector-dbs", "-f", "--server", page)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "events.txt", out)
	want := []string{"Last-Event-ID: 0", "Last-Event-ID: 9", "Last-Event-ID: 15"}
	if diff := cmp.Diff(want, f.asked); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
	for _, note := range []string{"reconnecting after seq 9", "the server asked this client to reconnect",
		"reconnecting after seq 15"} {
		if !strings.Contains(errOut, note) {
			t.Errorf("stderr lacks %q:\n%s", note, errOut)
		}
	}
}

// TestEventsFollowFromExpired asks for events the retention dropped: the
// client says so and continues at the oldest retained one.
func TestEventsFollowFromExpired(t *testing.T) {
	f := newFakeStream(t, "team-a", "survey-vector-dbs")
	f.oldest = 18
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out, errOut bytes.Buffer
	err := Events(context.Background(), &out, EventsOptions{
		URL: srv.URL + EventsPath("team-a", "survey-vector-dbs"), Follow: true, From: 3, Raw: true, ErrOut: &errOut,
		Backoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := string(bytes.Join(f.events[17:], []byte("\n"))) + "\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	if !strings.Contains(errOut.String(), "events 3 to 17 are past the stream's retention; continuing at 18") {
		t.Errorf("stderr: %s", errOut.String())
	}
	if diff := cmp.Diff([]string{"Last-Event-ID: 2", "Last-Event-ID: 17"}, f.asked); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
}

func TestEventsUnauthorized(t *testing.T) {
	f := newFakeStream(t, "team-a", "survey-vector-dbs")
	f.token = "viewer-token"
	srv := httptest.NewServer(f)
	defer srv.Close()
	for _, follow := range []string{"", "-f"} {
		args := []string{"events", "-n", "team-a", "survey-vector-dbs", "--server", srv.URL, "--token", "wrong"}
		if follow != "" {
			args = append(args, follow)
		}
		_, _, err := run(t, time.Now(), nil, args...)
		if err == nil || !strings.HasPrefix(err.Error(), "the run stream answered 401 Unauthorized: Unauthorized: "+
			`get researchruns.agentrun.dev "survey-vector-dbs"`) || !strings.Contains(err.Error(), "hint: ") {
			t.Errorf("events %s with a wrong token: %v", follow, err)
		}
	}
	_, _, err := run(t, time.Now(), nil, "events", "-n", "team-a", "other", "--server", srv.URL, "--token", "viewer-token")
	if err == nil || !strings.Contains(err.Error(), "404 NotFound") {
		t.Errorf("events of another run: %v", err)
	}
}

func TestDirectURL(t *testing.T) {
	const path = "/apis/stream.agentrun.dev/v1/namespaces/ns/researchruns/r/events"
	for _, c := range []struct{ server, url, token string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080" + path, ""},
		{"https://localhost:8443/", "https://localhost:8443" + path, ""},
		{"http://127.0.0.1:8080/?namespace=default#token=abc.def", "http://127.0.0.1:8080" + path, "abc.def"},
		{"https://h/prefix/apis/stream.agentrun.dev/v1/namespaces/x/researchruns/y/events", "https://h/prefix" + path, ""},
	} {
		u, tok, err := DirectURL(c.server, "ns", "r")
		if err != nil || u != c.url || tok != c.token {
			t.Errorf("DirectURL(%q) = %q, %q, %v; want %q, %q", c.server, u, tok, err, c.url, c.token)
		}
	}
	if _, _, err := DirectURL("localhost:8443", "ns", "r"); err == nil {
		t.Error("a URL without a scheme: want an error")
	}
}

func TestReadSSE(t *testing.T) {
	in := ": comment\n\nid: 1\nevent: A\ndata: {\"a\":\ndata: 1}\n\nretry: 10\ndata:x\r\n\r\nid: 3\ndata: cut"
	var got []sseMessage
	if err := readSSE(strings.NewReader(in), func(m sseMessage) bool { got = append(got, m); return false }); err != nil {
		t.Fatal(err)
	}
	want := []sseMessage{{id: "1", event: "A", data: "{\"a\":\n1}"}, {data: "x"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(sseMessage{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFormatSnapshot(t *testing.T) {
	ev := &streamEvent{Type: "STATE_SNAPSHOT", Snapshot: []byte(`{"phase": "Running"}`)}
	got := formatEvent(ev, 12, time.UTC)
	if want := `    -            STATE_SNAPSHOT             state as of seq 12: {"phase":"Running"}`; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
