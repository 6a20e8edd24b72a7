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
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// PathPattern is the route (http.ServeMux syntax). It has the shape of a
// Kubernetes API path so that it can later be served through API
// aggregation (kubectl get --raw) unchanged.
const PathPattern = "GET /apis/stream.agentrun.dev/v1/namespaces/{namespace}/researchruns/{name}/events"

// Path returns the events path of a run.
func Path(run stream.RunKey) string {
	return "/apis/stream.agentrun.dev/v1/namespaces/" + run.Namespace + "/researchruns/" + run.Name + "/events"
}

// ReconnectEventName names the CUSTOM event that ends a subscriber's stream
// when its queue overflows or the store fails: reconnect with Last-Event-ID.
const ReconnectEventName = "agentrun.dev/reconnect"

// Headers of a 410 response and of an export.
const (
	HeaderOldestSeq = "X-Agentrun-Oldest-Seq"
	HeaderLastSeq   = "X-Agentrun-Last-Seq"
)

// Source is the store side of the handler; *store.Store is one.
type Source interface {
	Bounds(ctx context.Context, run stream.RunKey) (store.Bounds, error)
	Subscribe(ctx context.Context, run stream.RunKey, after uint64) (*store.Subscription, error)
	Replay(ctx context.Context, run stream.RunKey, from uint64, fn func(stream.Event) error) error
}

var _ Source = (*store.Store)(nil)

// Options are the handler's dependencies and bounds.
type Options struct {
	Source Source
	// Authorizer decides each request (required).
	Authorizer Authorizer
	// RunUID returns the UID of the run named by run's namespace and name,
	// and whether it exists (else 404). Required. The stream served is
	// that UID's: a run created again under a deleted one's name never
	// shows the deleted one's events.
	RunUID func(ctx context.Context, run stream.RunKey) (uid string, found bool, err error)
	// Snapshot returns the run's state as of at least event lastSeq, sent as
	// the STATE_SNAPSHOT a new subscriber gets first. Nil: a new subscriber
	// gets the whole retained trajectory instead.
	Snapshot func(ctx context.Context, run stream.RunKey, lastSeq uint64) (json.RawMessage, error)

	// QueueEvents and QueueBytes bound each subscriber's queue (defaults
	// 256 events, 1 MiB).
	QueueEvents int
	QueueBytes  int
	// Keepalive is the idle time before a comment line (default 15 s).
	Keepalive time.Duration
	// WriteTimeout bounds each write to a client (default 30 s).
	WriteTimeout time.Duration
	// Registerer, if set, gets the handler's metrics.
	Registerer prometheus.Registerer
}

// Handler serves runs' event streams.
type Handler struct {
	opts Options
	mux  *http.ServeMux
	m    metrics

	hubs *hubs

	mu   sync.Mutex
	subs map[*Queue]struct{}
	peak QueueStats // of subscriptions already ended
}

type metrics struct {
	subscribers prometheus.Gauge
	merges      prometheus.Counter
	overflows   prometheus.Counter
	events      prometheus.Counter
}

// New returns a handler serving PathPattern.
func New(opts Options) (*Handler, error) {
	if opts.Source == nil || opts.Authorizer == nil || opts.RunUID == nil {
		return nil, errors.New("stream sse: Source, Authorizer and RunUID are required")
	}
	if opts.QueueEvents <= 0 {
		opts.QueueEvents = 256
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 1 << 20
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), subs: map[*Queue]struct{}{},
		hubs: &hubs{src: opts.Source, pendingBytes: 4 * opts.QueueBytes}}
	h.m = metrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentrun_stream_subscribers", Help: "Open run-stream SSE subscriptions.",
		}),
		merges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_subscriber_merged_total", Help: "Deltas merged in a slow subscriber's full queue.",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_subscriber_overflows_total", Help: "Subscriptions ended because finals alone overflowed the queue (told to reconnect).",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentrun_stream_sse_events_total", Help: "Events written to SSE clients.",
		}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(h.m.subscribers, h.m.merges, h.m.overflows, h.m.events)
	}
	h.mux.HandleFunc(PathPattern, h.serve)
	return h, nil
}

// ServeHTTP serves PathPattern (and 404s anything else).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Peak returns the highest queue length and size any subscriber has
// reached (open or ended), and the merges of all of them.
func (h *Handler) Peak() QueueStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.peak
	for q := range h.subs {
		p = p.fold(q.Stats())
	}
	return p
}

// Queues returns the open subscribers' queue statistics.
func (h *Handler) Queues() []QueueStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]QueueStats, 0, len(h.subs))
	for q := range h.subs {
		out = append(out, q.Stats())
	}
	return out
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	run := stream.RunKey{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if run.Namespace == "" || run.Name == "" {
		writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("run %q: namespace and name are both required", run), nil)
		return
	}
	attrs := Attributes{Verb: VerbGet, APIGroup: APIGroup, Resource: ResourceResearchRuns, Namespace: run.Namespace, Name: run.Name}
	d, err := h.opts.Authorizer.Authorize(ctx, r, attrs)
	switch {
	case err != nil:
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("cannot authorize %s: %v", attrs, err), nil)
		return
	case !d.Authenticated:
		writeStatus(w, http.StatusUnauthorized, "Unauthorized",
			withReason(fmt.Sprintf("Unauthorized: %s needs an authenticated caller (a bearer token the API server accepts)", attrs), d.Reason), nil)
		return
	case !d.Allowed:
		writeStatus(w, http.StatusForbidden, "Forbidden",
			withReason(fmt.Sprintf("researchruns.%s %q is forbidden: User %q cannot %s resource %q in API group %q in the namespace %q",
				attrs.APIGroup, attrs.Name, d.User, attrs.Verb, attrs.Resource, attrs.APIGroup, attrs.Namespace), d.Reason), nil)
		return
	}
	uid, ok, err := h.opts.RunUID(ctx, run)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("cannot look up researchruns.%s %q: %v", APIGroup, run.Name, err), nil)
		return
	}
	if !ok {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("researchruns.%s %q not found in namespace %q", APIGroup, run.Name, run.Namespace), nil)
		return
	}
	run.UID = uid
	bounds, err := h.opts.Source.Bounds(ctx, run)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("run stream of %s unavailable: %v", run, err), nil)
		return
	}
	if r.URL.Query().Get("format") == "jsonl" {
		h.export(w, r, run, bounds)
		return
	}
	after, resume, err := lastEventID(r)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error(), nil)
		return
	}
	if resume {
		if msg, gone := expired(run, after, bounds); gone {
			w.Header().Set(HeaderOldestSeq, strconv.FormatUint(bounds.Oldest, 10))
			w.Header().Set(HeaderLastSeq, strconv.FormatUint(bounds.Last, 10))
			writeStatus(w, http.StatusGone, "Expired", msg, map[string]any{"oldestSeq": bounds.Oldest, "lastSeq": bounds.Last})
			return
		}
	}
	h.stream(w, r, run, bounds, after, resume)
}

func withReason(msg, reason string) string {
	if reason == "" {
		return msg
	}
	return msg + ": " + reason
}

// lastEventID reads Last-Event-ID, or ?after= for a first EventSource
// connection that wants to resume.
func lastEventID(r *http.Request) (uint64, bool, error) {
	v := r.Header.Get("Last-Event-ID")
	src := "Last-Event-ID"
	if v == "" {
		v, src = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s %q is not an event seq (a non-negative integer)", src, v)
	}
	return n, true, nil
}

// expired says whether resuming after `after` would skip events: older than
// the retained window, or ahead of the last stored event.
func expired(run stream.RunKey, after uint64, b store.Bounds) (string, bool) {
	switch {
	case after > b.Last:
		return fmt.Sprintf("Last-Event-ID %d is past the last stored event of %s (%d); reconnect without Last-Event-ID for a fresh snapshot", after, run, b.Last), true
	case b.Oldest > 0 && after+1 < b.Oldest:
		return fmt.Sprintf("Last-Event-ID %d is older than the retention of %s: the oldest available event is %d; reconnect without Last-Event-ID for a fresh snapshot", after, run, b.Oldest), true
	}
	return "", false
}

func (h *Handler) export(w http.ResponseWriter, r *http.Request, run stream.RunKey, b store.Bounds) {
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", run.Namespace+"_"+run.Name+".jsonl"))
	w.Header().Set(HeaderOldestSeq, strconv.FormatUint(b.Oldest, 10))
	w.Header().Set(HeaderLastSeq, strconv.FormatUint(b.Last, 10))
	bw := bufio.NewWriterSize(w, 64<<10)
	err := h.opts.Source.Replay(r.Context(), run, 1, func(ev stream.Event) error {
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		data = append(data, '\n')
		_, err = bw.Write(data)
		return err
	})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil && r.Context().Err() == nil {
		// Headers are out: the truncation shows as a short file; say so in a
		// last line the reader can tell from an event.
		_, _ = fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
	}
}

func (h *Handler) stream(w http.ResponseWriter, r *http.Request, run stream.RunKey, b store.Bounds, after uint64, resume bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rc := http.NewResponseController(w)
	var snapshot json.RawMessage
	if !resume && h.opts.Snapshot != nil {
		var err error
		if snapshot, err = h.opts.Snapshot(ctx, run, b.Last); err != nil {
			writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("snapshot of %s: %v", run, err), nil)
			return
		}
		after = b.Last
	}
	q := NewQueue(h.opts.QueueEvents, h.opts.QueueBytes)
	leave, err := h.hubs.join(ctx, run, after, q)
	if err != nil {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("run stream of %s unavailable: %v", run, err), nil)
		return
	}
	defer leave()
	h.track(q, true)
	defer h.track(q, false)

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 16<<10)
	write := func(frame []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
		if _, err := bw.Write(frame); err != nil {
			return false
		}
		if err := bw.Flush(); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": agentrun run stream " + run.String() + "\n\n")) {
		return
	}
	if !resume && h.opts.Snapshot != nil {
		ev := stream.Event{Type: stream.StateSnapshot, Run: run, Snapshot: snapshot}
		if !write(frame(strconv.FormatUint(after, 10), ev)) {
			return
		}
	}
	var lastSent = after
	for {
		ev, res := q.Next(ctx, h.opts.Keepalive)
		switch res {
		case Got:
			if !write(frame(strconv.FormatUint(ev.Seq, 10), ev)) {
				return
			}
			lastSent = ev.Seq
			h.m.events.Inc()
		case Idle:
			if !write([]byte(": keepalive\n\n")) {
				return
			}
		case Overflowed:
			h.m.overflows.Inc()
			write(frame("", reconnect(run, lastSent, "SlowConsumer",
				"this client reads too slowly: its queue of final events is full; reconnect with Last-Event-ID")))
			return
		case Ended:
			if err := q.Err(); err != nil {
				write(frame("", reconnect(run, lastSent, "StoreUnavailable", err.Error())))
			}
			return
		case Cancelled:
			return
		}
	}
}

func (h *Handler) track(q *Queue, open bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if open {
		h.subs[q] = struct{}{}
		h.m.subscribers.Inc()
		return
	}
	delete(h.subs, q)
	h.m.subscribers.Dec()
	st := q.Stats()
	h.peak = h.peak.fold(st)
	h.m.merges.Add(float64(st.Merges))
}

func reconnect(run stream.RunKey, last uint64, reason, msg string) stream.Event {
	v, _ := json.Marshal(map[string]any{"reason": reason, "lastEventId": strconv.FormatUint(last, 10), "message": msg})
	return stream.Event{Type: stream.Custom, Run: run, Name: ReconnectEventName, Value: v}
}

// frame is one SSE message; an empty id writes no id line (the client's
// Last-Event-ID stays as it was).
func frame(id string, ev stream.Event) []byte {
	data, err := json.Marshal(ev)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"type": string(stream.Custom), "name": ReconnectEventName, "error": err.Error()})
	}
	b := make([]byte, 0, len(data)+64)
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// writeStatus writes a Kubernetes-style Status object.
func writeStatus(w http.ResponseWriter, code int, reason, msg string, details map[string]any) {
	st := map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "reason": reason, "code": code}
	if details != nil {
		st["details"] = details
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}
