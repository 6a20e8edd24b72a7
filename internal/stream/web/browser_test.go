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
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/sse"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// The browser tests drive the page in a real headless Chromium over an
// embedded NATS store, the sse handler and this package's handler on one
// server. They need Chromium: hack/chromium.sh finds or installs one.

const (
	testToken       = "test-token"
	lockedNamespace = "locked"
	browserTimeout  = 60 * time.Second
	waitTimeout     = 20 * time.Second // each wait, so that a failed one still shows the page
)

// chromiumPath finds Chromium as hack/chromium.sh does, and fails the test
// (never skips it) when there is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
		t.Fatalf("CHROMIUM=%s is not an executable; run hack/chromium.sh to find or install Chromium", p)
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no Chromium found ($CHROMIUM, /usr/bin/chromium, or chromium, chromium-browser, google-chrome on PATH): " +
		"the browser tests need one; run hack/chromium.sh (it installs Debian's chromium), " +
		"or set CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser is one headless Chromium tab, bounded by browserTimeout. It keeps
// the page's console; an uncaught exception or a Content-Security-Policy
// violation fails the test.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	console  []string
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU)
	bounded, cancelBound := context.WithTimeout(context.Background(), browserTimeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(bounded, opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc(); cancelBound() })
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx) // starts the browser
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.record(m)
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if t.Failed() || len(b.problems) > 0 {
			t.Logf("page console:\n%s", strings.Join(b.console, "\n"))
		}
		for _, p := range b.problems {
			t.Errorf("page: %s", p)
		}
	})
	return b
}

func (b *browser) record(m chromedp.ConsoleMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	line := m.String() + " (" + m.URL + ")"
	b.console = append(b.console, line)
	if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
		b.problems = append(b.problems, line)
	}
}

func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls the JavaScript predicate until it is true (at most
// waitTimeout); on failure it shows the page's text and test hooks.
func (b *browser) waitFor(t *testing.T, what, predicate string) {
	t.Helper()
	poll := chromedp.Poll[bool]("!!("+predicate+")",
		chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(waitTimeout))
	_, err := chromedp.Run(b.ctx, poll)
	// A poll does not survive a navigation (a click on a link): poll the
	// new document.
	for err != nil && b.ctx.Err() == nil && navigated(err) {
		_, err = chromedp.Run(b.ctx, poll)
	}
	if err != nil {
		dump, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](
			`document.body.innerText + "\n" + JSON.stringify(document.querySelector('#timeline')?.dataset)`))
		t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, dump)
	}
}

func navigated(err error) bool {
	return strings.Contains(err.Error(), "Cannot find context with specified id") ||
		strings.Contains(err.Error(), "Execution context was destroyed") ||
		strings.Contains(err.Error(), "Inspected target navigated or closed")
}

func evaluate[T any](t *testing.T, b *browser, expression string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}

// server is the store, the sse handler and the web handler on one
// httptest server, with a token-checking authorizer and a request log.
type server struct {
	store *store.Store
	srv   *httptest.Server
	state *runState
	cut   *cutter

	mu   sync.Mutex
	reqs []request
}

// request is what the server saw of one request.
type request struct {
	path, query, auth, lastEventID string
}

func newServer(t *testing.T, runs RunLister, exists func(stream.RunKey) bool) *server {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s := &server{store: st, state: &runState{v: map[string]any{}}}
	auth := sse.AuthorizerFunc(tokenAuthorizer)
	events, err := sse.New(sse.Options{
		Source:     st,
		Authorizer: auth,
		RunUID: func(_ context.Context, run stream.RunKey) (string, bool, error) {
			run.UID = uidOf(run.Name)
			return run.UID, exists(run), nil
		},
		Snapshot: s.state.snapshot,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.cut = &cutter{next: events, rewind: 30, open: map[*context.CancelFunc]struct{}{}}
	h, err := New(Options{Runs: runs, Authorizer: auth, Events: s.cut})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, request{path: r.URL.Path, query: r.URL.RawQuery,
			auth: r.Header.Get("Authorization"), lastEventID: r.Header.Get("Last-Event-ID")})
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// tokenAuthorizer admits "Bearer test-token" as alice, who may not read
// namespace "locked".
func tokenAuthorizer(_ context.Context, r *http.Request, a sse.Attributes) (sse.Decision, error) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		return sse.Decision{Reason: "no valid bearer token"}, nil
	}
	if a.Namespace == lockedNamespace {
		return sse.Decision{Authenticated: true, User: "alice"}, nil
	}
	return sse.Decision{Authenticated: true, Allowed: true, User: "alice"}, nil
}

// cutter ends every open event stream on demand, as a network failure
// would: the page must reconnect with Last-Event-ID. It also rewinds each
// Last-Event-ID by rewind events, as an at-least-once relay might, so that
// the page gets events it already has again and must ignore them.
type cutter struct {
	next   http.Handler
	rewind uint64
	mu     sync.Mutex
	open   map[*context.CancelFunc]struct{}
}

func (c *cutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("format") != "" {
		c.next.ServeHTTP(w, r)
		return
	}
	if n, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		r.Header.Set("Last-Event-ID", strconv.FormatUint(n-min(n, c.rewind), 10))
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	c.mu.Lock()
	c.open[&cancel] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.open, &cancel)
		c.mu.Unlock()
	}()
	c.next.ServeHTTP(w, r.WithContext(ctx))
}

// cutAll ends the open streams and returns how many there were.
func (c *cutter) cutAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cancel := range c.open {
		(*cancel)()
	}
	return len(c.open)
}

// runState stands in for the status watcher: the run's state, which the
// script changes before it publishes each STATE_DELTA, so that a snapshot
// always includes at least the events before it.
type runState struct {
	mu sync.Mutex
	v  map[string]any
}

func (s *runState) snapshot(context.Context, stream.RunKey, uint64) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(s.v)
}

// patch applies top-level add / replace / remove ops.
func (s *runState) patch(ops []map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		key := strings.TrimPrefix(op["path"].(string), "/")
		if op["op"] == "remove" {
			delete(s.v, key)
		} else {
			s.v[key] = op["value"]
		}
	}
}

func op(kind, path string, value ...any) map[string]any {
	m := map[string]any{"op": kind, "path": path}
	if len(value) > 0 {
		m["value"] = value[0]
	}
	return m
}

var runA = stream.RunKey{Namespace: "team-a", Name: "survey.v2", UID: uidOf("survey.v2")}

// uidOf is the UID of the test's run of that name.
func uidOf(name string) string { return "uid-" + name }

const actionID = "report.publish-bb8d56358e66da27"

// script publishes a run through the store as the gateway and the status
// watcher will: reasoning, a text block in many small deltas, a tool call,
// approvals, a refusal, state changes and the end. It stops at two gates so
// that the test can act while the text block is half streamed (reload) and
// once it is whole (cut the streams).
type script struct {
	s       *server
	half    []string // the text deltas before the first gate
	rest    []string // and after it
	halfway chan struct{}
	resume1 chan struct{}
	resume2 chan struct{}
	done    chan struct{}

	err      error
	cutAfter uint64 // the seq of the last event before the streams were cut
	cut      int    // how many streams were cut
	last     uint64
}

func newScript(s *server) *script {
	sc := &script{s: s, halfway: make(chan struct{}), resume1: make(chan struct{}),
		resume2: make(chan struct{}), done: make(chan struct{})}
	for i := range 120 {
		d := fmt.Sprintf("w%03d ", i)
		if i < 60 {
			sc.half = append(sc.half, d)
		} else {
			sc.rest = append(sc.rest, d)
		}
	}
	return sc
}

func (sc *script) text() string { return strings.Join(sc.half, "") + strings.Join(sc.rest, "") }

func (sc *script) pub(ctx context.Context, ev stream.Event) {
	if sc.err != nil {
		return
	}
	ev.Timestamp = time.Now().UnixMilli()
	sc.last, sc.err = sc.s.store.Publish(ctx, runA, ev)
}

func (sc *script) delta(ctx context.Context, ops ...map[string]any) {
	sc.s.state.patch(ops)
	patch, _ := json.Marshal(ops)
	sc.pub(ctx, stream.Event{Type: stream.StateDelta, Patch: patch})
}

func (sc *script) custom(ctx context.Context, name string, value any) {
	v, _ := json.Marshal(value)
	sc.pub(ctx, stream.Event{Type: stream.Custom, Name: name, Value: v})
}

func (sc *script) deltas(ctx context.Context, typ stream.EventType, id string, parts []string) {
	for _, p := range parts {
		ev := stream.Event{Type: typ, MessageID: id, Delta: p}
		if typ == stream.ToolCallArgs {
			ev = stream.Event{Type: typ, ToolCallID: id, Delta: p}
		}
		sc.pub(ctx, ev)
		time.Sleep(3 * time.Millisecond) // a model streaming tokens
	}
}

func (sc *script) gate(ctx context.Context, signal, wait chan struct{}) {
	if signal != nil {
		close(signal)
	}
	select {
	case <-wait:
	case <-ctx.Done():
		if sc.err == nil {
			sc.err = ctx.Err()
		}
	}
}

func (sc *script) run(ctx context.Context) {
	defer close(sc.done)
	sc.s.state.patch([]map[string]any{op("add", "/phase", "Running"), op("add", "/message", "researching"),
		op("add", "/awaitingApproval", false)})
	sc.pub(ctx, stream.Event{Type: stream.RunStarted, ThreadID: runA.String(), RunID: "survey.v2-1"})
	sc.pub(ctx, stream.Event{Type: stream.StepStarted, StepName: "step-1"})
	sc.pub(ctx, stream.Event{Type: stream.ReasoningMessageStart, MessageID: "r-1"})
	sc.deltas(ctx, stream.ReasoningMessageContent, "r-1", []string{"The user ", "wants ", "sources."})
	sc.pub(ctx, stream.Event{Type: stream.ReasoningMessageEnd, MessageID: "r-1"})
	request := map[string]any{"actionID": actionID, "tool": "report.publish", "summary": "publish the survey",
		"arguments": approvalArguments, "argumentsBytes": len(approvalArguments), "argumentsSHA256": strings.Repeat("ab", 32)}
	sc.custom(ctx, "agentrun.dev/approval-requested", request)
	sc.delta(ctx, op("add", "/pendingApprovals", []any{request}), op("replace", "/awaitingApproval", true))
	sc.pub(ctx, stream.Event{Type: stream.TextMessageStart, MessageID: "m-1", Role: "assistant"})
	sc.deltas(ctx, stream.TextMessageContent, "m-1", sc.half)
	sc.gate(ctx, sc.halfway, sc.resume1) // the test reloads the page
	sc.deltas(ctx, stream.TextMessageContent, "m-1", sc.rest)
	sc.gate(ctx, nil, sc.resume2) // the test saw the whole text
	sc.cutAfter, sc.cut = sc.last, sc.s.cut.cutAll()
	sc.pub(ctx, stream.Event{Type: stream.TextMessageEnd, MessageID: "m-1"})
	sc.pub(ctx, stream.Event{Type: stream.ToolCallStart, ToolCallID: "call-1", ToolCallName: "http.get", ParentMessageID: "m-1"})
	sc.deltas(ctx, stream.ToolCallArgs, "call-1", []string{`{"url":"https://`, `example.org/survey"}`})
	sc.pub(ctx, stream.Event{Type: stream.ToolCallEnd, ToolCallID: "call-1"})
	sc.pub(ctx, stream.Event{Type: stream.ToolCallResult, MessageID: "t-1", ToolCallID: "call-1", Content: "200 OK, 1,204 bytes"})
	sc.custom(ctx, "agentrun.dev/approval-decided", map[string]any{"actionID": actionID, "decision": "Approve", "approver": "alice"})
	sc.delta(ctx, op("remove", "/pendingApprovals"), op("replace", "/awaitingApproval", false))
	sc.custom(ctx, "agentrun.dev/refusal", map[string]any{"tool": "shell.exec", "reason": "NotInCatalogue"})
	sc.delta(ctx, op("replace", "/phase", "Finalizing"), op("add", "/reason", "BudgetExhausted"),
		op("replace", "/message", "working budget exhausted at 40/40 model requests"))
	sc.pub(ctx, stream.Event{Type: stream.StepFinished, StepName: "step-1"})
	sc.delta(ctx, op("replace", "/phase", "Terminated"), op("add", "/settlement", "Complete"),
		op("replace", "/message", "finalized: report published"))
	sc.pub(ctx, stream.Event{Type: stream.RunFinished, ThreadID: runA.String(), RunID: "survey.v2-1",
		Outcome: json.RawMessage(`{"type":"success"}`)})
}

// await waits for the channel, or fails if the script failed first.
func (sc *script) await(t *testing.T, b *browser, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-sc.done:
		select {
		case <-ch:
		default:
			t.Fatalf("waiting for %s: the script ended: %v", what, sc.err)
		}
	case <-b.ctx.Done():
		t.Fatalf("waiting for %s: %v", what, b.ctx.Err())
	}
}

// pageState is what the run view shows, read through its DOM hooks.
type pageState struct {
	Blocks       map[string]int `json:"blocks"`
	Text         string         `json:"text"`
	Reasoning    string         `json:"reasoning"`
	ToolName     string         `json:"toolName"`
	ToolArgs     string         `json:"toolArgs"`
	ToolResult   string         `json:"toolResult"`
	Phase        string         `json:"phase"`
	Header       string         `json:"header"`
	LastSeq      uint64         `json:"lastSeq"`
	Customs      []string       `json:"customs"`
	Final        string         `json:"final"`
	Approvals    []string       `json:"approvals"`
	ApprovalArgs []string       `json:"approvalArgs"`
	URL          string         `json:"url"`
	StoredToken  string         `json:"storedToken"`
	ErrorMessage string         `json:"error"`
}

const readPage = `(() => {
  const q = (s) => { const e = document.querySelector(s); return e ? e.textContent : ''; };
  const blocks = {};
  for (const e of document.querySelectorAll('[data-block]')) blocks[e.dataset.block] = (blocks[e.dataset.block] || 0) + 1;
  return {
    blocks,
    text: q('[data-block="m-1"] .body'),
    reasoning: q('[data-block="r-1"] .body'),
    toolName: q('[data-block="call-1"] .label'),
    toolArgs: q('[data-block="call-1"] .args'),
    toolResult: q('[data-block="call-1"] .result'),
    phase: document.querySelector('#run-header').dataset.phase,
    header: q('#run-header'),
    lastSeq: Number(document.querySelector('#timeline').dataset.lastSeq),
    customs: Array.from(document.querySelectorAll('#timeline .custom'), (e) => e.dataset.name),
    final: q('#timeline .final'),
    approvals: Array.from(document.querySelectorAll('#approvals:not([hidden]) code.cmd'), (e) => e.textContent),
    approvalArgs: Array.from(document.querySelectorAll('#approvals:not([hidden]) pre.args'), (e) => e.textContent),
    url: location.href,
    storedToken: sessionStorage.getItem('agentrun.token') || '',
    error: q('#error'),
  };
})()`

// approvalArguments are the arguments of the pending approval: what matters
// lies beyond the first 256 bytes.
var approvalArguments = `{"content":"` + strings.Repeat("A fair survey of the field. ", 12) +
	`Also mail the draft to eve@example.org.","section":"Survey"}`

// TestRunViewReloadMidRun streams a run into the page, reloads it while the
// text block is half streamed, and cuts its stream once more before the end
// (the resumed stream repeats the 30 events before its Last-Event-ID): every
// block is shown once, whole.
func TestRunViewReloadMidRun(t *testing.T) {
	s := newServer(t, RunListerFunc(noRuns), func(run stream.RunKey) bool { return run == runA })
	b := newBrowser(t)
	sc := newScript(s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); <-sc.done })
	start := time.Now()
	go sc.run(ctx)

	b.do(t, "open the run", chromedp.Navigate(s.srv.URL+"/?namespace=team-a&run=survey.v2#token="+testToken))
	sc.await(t, b, sc.halfway, "the first half of the text block")
	b.waitFor(t, "some of the text block", `document.querySelector('[data-block="m-1"] .body')?.textContent.length > 0`)
	b.waitFor(t, "the pending approval", `document.querySelector('#approvals code.cmd')`)
	before := evaluate[pageState](t, b, readPage)
	full := sc.text()
	if len(before.Text) >= len(full) || !strings.HasPrefix(full, before.Text) {
		t.Fatalf("before the reload the text block shows %q: want a part of %q", before.Text, full)
	}
	wantCmd := `kubectl patch researchrun survey.v2 -n team-a --type=json -p ` +
		`'[{"op":"add","path":"/spec/approvals/-","value":{"actionID":"` + actionID + `","decision":"Approve"}}]'`
	if diff := cmp.Diff([]string{wantCmd}, before.Approvals); diff != "" {
		t.Errorf("pending approval command (-want +got):\n%s", diff)
	}
	// The approver reads the whole arguments, also what lies beyond the
	// first 256 bytes (issue 25 item 9).
	if diff := cmp.Diff([]string{approvalArguments}, before.ApprovalArgs); diff != "" {
		t.Errorf("pending approval arguments (-want +got):\n%s", diff)
	}
	if strings.Contains(before.URL, "token") || before.StoredToken != testToken {
		t.Errorf("the token: URL %q (want it gone from the address bar), sessionStorage %q", before.URL, before.StoredToken)
	}

	close(sc.resume1) // the rest of the text streams while the page reloads
	b.do(t, "reload", chromedp.Reload())
	b.waitFor(t, "the whole text after the reload",
		`document.querySelector('[data-block="m-1"] .body')?.textContent === `+jsString(full))
	close(sc.resume2) // the script cuts the stream and finishes the run
	b.waitFor(t, "the run to finish", `document.querySelector('#timeline[data-finished="true"]')`)
	<-sc.done
	if sc.err != nil {
		t.Fatalf("script: %v", sc.err)
	}
	t.Logf("run streamed, reloaded, cut and finished in %v", time.Since(start))

	checkFinishedPage(t, evaluate[pageState](t, b, readPage), sc)
	checkRequests(t, s.requests(), sc)
}

func checkFinishedPage(t *testing.T, got pageState, sc *script) {
	t.Helper()
	if diff := cmp.Diff(map[string]int{"r-1": 1, "m-1": 1, "call-1": 1}, got.Blocks); diff != "" {
		t.Errorf("elements per block id (-want +got):\n%s", diff)
	}
	if got.Text != sc.text() {
		t.Errorf("text block:\n got %q\nwant %q", got.Text, sc.text())
	}
	if got.Reasoning != "The user wants sources." {
		t.Errorf("reasoning block: %q", got.Reasoning)
	}
	if got.ToolName != "http.get" || got.ToolArgs != `{"url":"https://example.org/survey"}` || got.ToolResult != "200 OK, 1,204 bytes" {
		t.Errorf("tool call: name %q, arguments %q, result %q", got.ToolName, got.ToolArgs, got.ToolResult)
	}
	if got.Phase != "Terminated" || !strings.Contains(got.Header, "BudgetExhausted") ||
		!strings.Contains(got.Header, "finalized: report published") {
		t.Errorf("header: data-phase %q, text %q", got.Phase, got.Header)
	}
	wantCustoms := []string{"agentrun.dev/approval-requested", "agentrun.dev/approval-decided", "agentrun.dev/refusal"}
	if diff := cmp.Diff(wantCustoms, got.Customs); diff != "" {
		t.Errorf("CUSTOM events (-want +got):\n%s", diff)
	}
	if len(got.Approvals) != 0 {
		t.Errorf("pending approvals after the decision: %q", got.Approvals)
	}
	if !strings.Contains(got.Final, "Run finished (success)") || !strings.Contains(got.Final, "BudgetExhausted") {
		t.Errorf("final block: %q", got.Final)
	}
	if got.LastSeq != sc.last || got.ErrorMessage != "" {
		t.Errorf("data-last-seq %d, want %d; error %q", got.LastSeq, sc.last, got.ErrorMessage)
	}
}

// checkRequests: every API request carried the token; after the reload the
// page read the history; after the cut it resumed from the last event it had.
func checkRequests(t *testing.T, reqs []request, sc *script) {
	t.Helper()
	var history, resumed int
	for _, r := range reqs {
		if !strings.HasPrefix(r.path, "/apis/") {
			continue
		}
		if r.auth != "Bearer "+testToken {
			t.Errorf("%s?%s: Authorization %q", r.path, r.query, r.auth)
		}
		if r.query == "format=jsonl" {
			history++
		}
		if r.lastEventID == strconv.FormatUint(sc.cutAfter, 10) {
			resumed++
		}
	}
	if sc.cut == 0 || history == 0 || resumed != 1 {
		t.Errorf("streams cut %d, history reads %d, resumptions with Last-Event-ID %d (want 1): %+v",
			sc.cut, history, resumed, reqs)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// lister is a RunLister whose runs the test changes.
type lister struct {
	mu   sync.Mutex
	runs map[string][]RunSummary
}

func (l *lister) List(_ context.Context, ns string) ([]RunSummary, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs[ns]), nil
}

func (l *lister) setPhase(ns string, i int, phase string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[ns][i].Phase = phase
}

// TestRunsView lists a namespace's runs, follows the table's refresh, opens a
// run, and shows the Status message of a forbidden namespace, a missing run
// and a request without a token.
func TestRunsView(t *testing.T) {
	runs := &lister{runs: map[string][]RunSummary{"team-a": {
		{Name: "survey.v2", Namespace: "team-a", Phase: "Running", Steps: 7, Budget: Budget{
			ModelRequests: Count{Used: 3, Granted: 40}, ToolCalls: Count{Used: 2, Granted: 10}, Tokens: Count{Used: 1200, Granted: 100000}},
			PendingApprovals: []PendingApproval{{Action: actionID, Tool: "report.publish"}}},
		{Name: "weekly-digest", Namespace: "team-a", Phase: "Terminated", Reason: "Completed", Steps: 12, Budget: Budget{
			ModelRequests: Count{Used: 9}}},
	}}}
	s := newServer(t, runs, func(run stream.RunKey) bool {
		l, _ := runs.List(context.Background(), run.Namespace)
		return slices.ContainsFunc(l, func(r RunSummary) bool { return r.Name == run.Name })
	})
	s.state.patch([]map[string]any{op("add", "/phase", "Terminated"), op("add", "/reason", "Completed")})
	b := newBrowser(t)

	b.do(t, "open the runs", chromedp.Navigate(s.srv.URL+"/?namespace=team-a#token="+testToken))
	b.waitFor(t, "two rows", `document.querySelectorAll('#runs tbody tr').length === 2`)
	rows := `Array.from(document.querySelectorAll('#runs tbody tr'), (tr) => Array.from(tr.cells, (td) => td.textContent))`
	want := [][]string{
		{"survey.v2", "Running", "", "3 / 40", "2 / 10", "1200 / 100000", "7", "1"},
		{"weekly-digest", "Terminated", "Completed", "9 / –", "0 / –", "0 / –", "12", "0"},
	}
	if diff := cmp.Diff(want, evaluate[[][]string](t, b, rows)); diff != "" {
		t.Errorf("runs table (-want +got):\n%s", diff)
	}

	runs.setPhase("team-a", 0, "Finalizing")
	b.waitFor(t, "the refreshed phase", `document.querySelector('#runs tr[data-run="survey.v2"]').cells[1].textContent === "Finalizing"`)

	b.do(t, "open a run", chromedp.Click(chromedp.CSS(`#runs tr[data-run="weekly-digest"] td:nth-child(3)`)))
	b.waitFor(t, "the run view", `!document.querySelector('#run-view').hidden && `+
		`document.querySelector('#run-header').dataset.phase === "Terminated"`)
	if got := evaluate[string](t, b, `document.querySelector('#run-name').textContent`); got != "team-a/weekly-digest" {
		t.Errorf("run view of %q", got)
	}

	b.do(t, "change the namespace", chromedp.SetValue(chromedp.CSS("#ns"), lockedNamespace), chromedp.Click(chromedp.CSS("#ns-go")))
	msg := `researchruns.agentrun.dev is forbidden: User "alice" cannot list resource "researchruns" in API group "agentrun.dev" in the namespace "locked"`
	b.waitFor(t, "the 403 Status message", `!document.querySelector('#error').hidden && `+
		`document.querySelector('#error').textContent === `+jsString(msg))
	if evaluate[bool](t, b, `document.querySelector('#runs').hidden`) != true {
		t.Error("the runs table is still shown after a 403")
	}

	b.do(t, "open a run that does not exist", chromedp.Navigate(s.srv.URL+"/?namespace=team-a&run=missing"))
	b.waitFor(t, "the 404 Status message", `document.querySelector('#error').textContent === `+
		jsString(`researchruns.agentrun.dev "missing" not found in namespace "team-a"`))

	// A new tab has no token in its sessionStorage.
	tab, cancel := chromedp.NewContext(b.ctx)
	defer cancel()
	anon := &browser{ctx: tab}
	anon.do(t, "open the runs without a token", chromedp.Navigate(s.srv.URL+"/?namespace=team-a"))
	anon.waitFor(t, "the 401 Status message", `document.querySelector('#error').textContent === `+jsString(
		`Unauthorized: list researchruns.agentrun.dev in namespace "team-a" needs an authenticated caller `+
			`(a bearer token the API server accepts): no valid bearer token`))
}
