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
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The run stream's wire format (docs/stream.md). This package speaks it
// over plain HTTP and imports nothing of internal/stream.
const (
	// eventTypeSnapshot is the first event of a new subscription: the run's
	// state up to the seq in its SSE id (it has no seq of its own).
	eventTypeSnapshot = "STATE_SNAPSHOT"
	// reconnectEventName is the CUSTOM event the server sends, without an
	// SSE id, before it ends a stream the client should resume.
	reconnectEventName = "agentrun.dev/reconnect"
	// maxEventLine bounds one event's JSON (the store's default is 1 MiB).
	maxEventLine = 16 << 20
)

// EventsPath is the run stream's path of a run, below the server's root.
func EventsPath(namespace, run string) string {
	return "/apis/stream.agentrun.dev/v1/namespaces/" + url.PathEscape(namespace) +
		"/researchruns/" + url.PathEscape(run) + "/events"
}

// EventsOptions say where a run's stream is and how to print it.
type EventsOptions struct {
	// URL is the run's events endpoint (…/researchruns/RUN/events), without
	// a query.
	URL string
	// Client makes the requests; nil: http.DefaultClient. It must not time
	// out a whole response when Follow is set.
	Client *http.Client
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// Follow streams the events over SSE as they are stored, resuming with
	// Last-Event-ID after a disconnect, until the run's end event; without
	// it Events prints the export (?format=jsonl) and returns.
	Follow bool
	// From is the first seq to print (0 and 1: from the start).
	From uint64
	// Raw prints each event's JSON as received (-o jsonl).
	Raw bool
	// ErrOut receives notes: reconnects, expired events. Nil: discarded.
	ErrOut io.Writer
	// Backoff is the first wait before a reconnect (default 500ms); it
	// doubles up to MaxBackoff (default 10s) while connections fail.
	Backoff, MaxBackoff time.Duration
	// Location is the time zone of the event times; nil: time.Local.
	Location *time.Location
	// Hint is added to a 401 or 403 answer: how to authenticate on this
	// path.
	Hint string
}

func (o *EventsOptions) defaults() {
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.ErrOut == nil {
		o.ErrOut = io.Discard
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.From == 0 {
		o.From = 1
	}
}

// Events prints a run's stream: the export, or with Follow the live SSE
// stream, one readable line per event (or the raw JSON lines).
func Events(ctx context.Context, w io.Writer, o EventsOptions) error {
	o.defaults()
	if o.Follow {
		return follow(ctx, w, &o)
	}
	return export(ctx, w, &o)
}

// StatusError is a non-200 answer of the stream server (or of the API
// server's proxy in front of it): a Kubernetes Status.
type StatusError struct {
	Code    int
	Reason  string
	Message string
	// OldestSeq and LastSeq are a 410's details.
	OldestSeq, LastSeq uint64
	Hint               string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("the run stream answered %d", e.Code)
	if e.Reason != "" {
		msg += " " + e.Reason
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Hint != "" && (e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden) {
		msg += "\n" + e.Hint
	}
	return msg
}

func statusError(resp *http.Response, hint string) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &StatusError{Code: resp.StatusCode, Hint: hint}
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Details struct {
			OldestSeq uint64 `json:"oldestSeq"`
			LastSeq   uint64 `json:"lastSeq"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) == nil && (st.Reason != "" || st.Message != "") {
		e.Reason, e.Message = st.Reason, st.Message
		e.OldestSeq, e.LastSeq = st.Details.OldestSeq, st.Details.LastSeq
	} else {
		e.Reason = http.StatusText(resp.StatusCode)
		e.Message = strings.TrimSpace(truncate(string(body), 512))
	}
	if e.OldestSeq == 0 {
		e.OldestSeq, _ = strconv.ParseUint(resp.Header.Get("X-Agentrun-Oldest-Seq"), 10, 64)
	}
	if e.LastSeq == 0 {
		e.LastSeq, _ = strconv.ParseUint(resp.Header.Get("X-Agentrun-Last-Seq"), 10, 64)
	}
	return e
}

func (o *EventsOptions) request(ctx context.Context, query string, header http.Header) (*http.Response, error) {
	u := o.URL
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	maps.Copy(req.Header, header)
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		return nil, statusError(resp, o.Hint)
	}
	return resp, nil
}

// export prints the JSON-lines export: every retained event from seq 1.
func export(ctx context.Context, w io.Writer, o *EventsOptions) error {
	resp, err := o.request(ctx, "format=jsonl", http.Header{"Accept": {"application/jsonl"}})
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if oldest, _ := strconv.ParseUint(resp.Header.Get("X-Agentrun-Oldest-Seq"), 10, 64); oldest > o.From {
		_, _ = fmt.Fprintf(o.ErrOut, "note: events before seq %d are past the stream's retention\n", oldest)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev streamEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("the export has a line that is not an event: %w", err)
		}
		if ev.Type == "" && ev.Error != "" {
			return fmt.Errorf("the export was cut short by the server: %s", ev.Error)
		}
		if ev.Seq < o.From {
			continue
		}
		o.print(w, line, &ev, 0)
	}
	return sc.Err()
}

func (o *EventsOptions) print(w io.Writer, raw []byte, ev *streamEvent, snapshotID uint64) {
	if o.Raw {
		_, _ = w.Write(append(append([]byte{}, raw...), '\n'))
		return
	}
	_, _ = fmt.Fprintln(w, formatEvent(ev, snapshotID, o.Location))
}

// follow streams SSE, resuming after the last event it printed whenever the
// connection ends, until the run's end event or ctx is done.
func follow(ctx context.Context, w io.Writer, o *EventsOptions) error {
	st := &followState{last: o.From - 1, resume: true}
	delay := o.Backoff
	for {
		got, err := o.connect(ctx, w, st)
		if st.done || ctx.Err() != nil {
			return nil
		}
		var se *StatusError
		switch {
		case errors.As(err, &se) && se.Code == http.StatusGone:
			st.expired(o.ErrOut, se)
			continue
		case errors.As(err, &se) && se.Code != http.StatusTooManyRequests && se.Code < 500:
			return err
		case err != nil:
			_, _ = fmt.Fprintf(o.ErrOut, "note: %v; reconnecting after seq %d in %s\n", err, st.last, delay)
		default:
			_, _ = fmt.Fprintf(o.ErrOut, "note: the stream ended; reconnecting after seq %d in %s\n", st.last, delay)
		}
		if got > 0 {
			delay = o.Backoff
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		if got == 0 {
			delay = min(delay*2, o.MaxBackoff)
		}
	}
}

// followState is where a followed stream is.
type followState struct {
	// last is the seq of the last event printed (or that a snapshot covers).
	last uint64
	// resume sends Last-Event-ID: last; without it the server starts with a
	// snapshot.
	resume bool
	// done: the run's end event was printed.
	done bool
}

// expired handles a 410: the position is older than the retention (go on
// from the oldest retained event) or past the stream's end (a run created
// again under its name: start over with a snapshot).
func (st *followState) expired(errOut io.Writer, se *StatusError) {
	if se.OldestSeq > st.last+1 && st.last < se.LastSeq {
		_, _ = fmt.Fprintf(errOut, "note: events %d to %d are past the stream's retention; continuing at %d\n",
			st.last+1, se.OldestSeq-1, se.OldestSeq)
		st.last = se.OldestSeq - 1
		return
	}
	_, _ = fmt.Fprintf(errOut, "note: %s; starting over from a snapshot\n", se.Message)
	st.last, st.resume = 0, false
}

// connect opens one SSE connection and prints its events; it returns how
// many it printed.
func (o *EventsOptions) connect(ctx context.Context, w io.Writer, st *followState) (int, error) {
	header := http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
	if st.resume {
		header.Set("Last-Event-ID", strconv.FormatUint(st.last, 10))
	}
	resp, err := o.request(ctx, "", header)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	printed := 0
	err = readSSE(resp.Body, func(m sseMessage) bool {
		if m.data == "" {
			return false
		}
		var ev streamEvent
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			_, _ = fmt.Fprintf(o.ErrOut, "note: skipped an event that is not JSON: %v\n", err)
			return false
		}
		id, hasID := uint64(0), false
		if m.id != "" {
			if n, err := strconv.ParseUint(m.id, 10, 64); err == nil {
				id, hasID = n, true
			}
		}
		switch {
		case ev.Type == eventTypeSnapshot && ev.Seq == 0:
			o.print(w, []byte(m.data), &ev, id)
			st.last, st.resume = id, true
		case ev.Type == "CUSTOM" && ev.Name == reconnectEventName && !hasID:
			_, _ = fmt.Fprintf(o.ErrOut, "note: the server asked this client to reconnect: %s\n", compact(ev.Value))
			return false
		default:
			seq := ev.Seq
			if seq == 0 {
				seq = id
			}
			if seq != 0 && seq <= st.last {
				return false // already printed before a reconnect
			}
			o.print(w, []byte(m.data), &ev, 0)
			if seq != 0 {
				st.last, st.resume = seq, true
			}
		}
		printed++
		if ev.Type == "RUN_FINISHED" || ev.Type == "RUN_ERROR" {
			st.done = true
			return true
		}
		return false
	})
	if ctx.Err() != nil {
		return printed, nil
	}
	return printed, err
}

// sseMessage is one dispatched Server-Sent Event.
type sseMessage struct {
	id, event, data string
}

// readSSE parses an event stream (the WHATWG format: fields, comments,
// events ended by a blank line) and calls fn for each event until fn
// returns true or the stream ends. An event cut off by the end of the
// stream is not dispatched.
func readSSE(r io.Reader, fn func(sseMessage) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var m sseMessage
	var data strings.Builder
	hasData := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if hasData {
				m.data = strings.TrimSuffix(data.String(), "\n")
				if fn(m) {
					return nil
				}
			}
			m, hasData = sseMessage{}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			m.id = value
		case "event":
			m.event = value
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
			hasData = true
		}
	}
}

// streamEvent is the union of the AG-UI fields the stream writes.
type streamEvent struct {
	Type            string          `json:"type"`
	Seq             uint64          `json:"seq"`
	Timestamp       int64           `json:"timestamp"`
	MessageID       string          `json:"messageId"`
	Role            string          `json:"role"`
	Name            string          `json:"name"`
	Delta           json.RawMessage `json:"delta"`
	ToolCallID      string          `json:"toolCallId"`
	ToolCallName    string          `json:"toolCallName"`
	ParentMessageID string          `json:"parentMessageId"`
	Content         json.RawMessage `json:"content"`
	Snapshot        json.RawMessage `json:"snapshot"`
	ThreadID        string          `json:"threadId"`
	RunID           string          `json:"runId"`
	Result          json.RawMessage `json:"result"`
	Outcome         json.RawMessage `json:"outcome"`
	Message         string          `json:"message"`
	Code            string          `json:"code"`
	StepName        string          `json:"stepName"`
	Value           json.RawMessage `json:"value"`
	// Error is the export's last line when the server cut it short.
	Error string `json:"error"`
}

// detailLimit bounds the readable form of a result, snapshot or value.
const detailLimit = 300

// formatEvent is one readable line: seq, time, type, and the event's
// essential field.
func formatEvent(ev *streamEvent, snapshotID uint64, loc *time.Location) string {
	seq := "    -"
	if ev.Seq > 0 {
		seq = fmt.Sprintf("%5d", ev.Seq)
	}
	at := "        "
	if ev.Timestamp > 0 {
		at = time.UnixMilli(ev.Timestamp).In(loc).Format("15:04:05")
	}
	return strings.TrimRight(fmt.Sprintf("%s  %s  %-25s  %s", seq, at, ev.Type, detail(ev, snapshotID)), " ")
}

func detail(ev *streamEvent, snapshotID uint64) string {
	switch ev.Type {
	case "RUN_STARTED":
		return fmt.Sprintf("thread %s, run %s", ev.ThreadID, ev.RunID)
	case "RUN_FINISHED":
		return runFinished(ev)
	case "RUN_ERROR":
		if ev.Code != "" {
			return ev.Code + ": " + oneLine(ev.Message)
		}
		return oneLine(ev.Message)
	case "STEP_STARTED", "STEP_FINISHED":
		return ev.StepName
	case "TEXT_MESSAGE_START":
		if ev.Role != "" {
			return ev.MessageID + " (" + ev.Role + ")"
		}
		return ev.MessageID
	case "TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT":
		return ev.MessageID + " " + strconv.Quote(text(ev.Delta))
	case "TEXT_MESSAGE_END", "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_END", "REASONING_END":
		return ev.MessageID
	case "TOOL_CALL_START":
		s := ev.ToolCallID + " " + ev.ToolCallName
		if ev.ParentMessageID != "" {
			s += " (in " + ev.ParentMessageID + ")"
		}
		return s
	case "TOOL_CALL_ARGS":
		return ev.ToolCallID + " " + oneLine(text(ev.Delta))
	case "TOOL_CALL_END":
		return ev.ToolCallID
	case "TOOL_CALL_RESULT":
		return ev.ToolCallID + " result: " + truncate(oneLine(content(ev.Content)), detailLimit)
	case eventTypeSnapshot:
		s := truncate(compact(ev.Snapshot), detailLimit)
		if ev.Seq == 0 {
			return fmt.Sprintf("state as of seq %d: %s", snapshotID, s)
		}
		return s
	case "STATE_DELTA":
		return patchText(ev.Delta)
	case "CUSTOM":
		return custom(ev)
	}
	return truncate(compact(ev.Value), detailLimit)
}

func runFinished(ev *streamEvent) string {
	var r struct {
		Reason     string `json:"reason"`
		Settlement string `json:"settlement"`
		Message    string `json:"message"`
	}
	var out struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(ev.Outcome, &out)
	s := ""
	if json.Unmarshal(ev.Result, &r) == nil && r.Reason != "" {
		s = r.Reason
		if r.Settlement != "" {
			s += ", settlement " + r.Settlement
		}
		if r.Message != "" {
			s += ": " + oneLine(r.Message)
		}
	} else if len(ev.Result) > 0 {
		s = truncate(compact(ev.Result), detailLimit)
	}
	if out.Type != "" {
		s = strings.TrimSpace(s + " (outcome " + out.Type + ")")
	}
	return s
}

// custom renders the CUSTOM events agentrun writes by their meaning, and
// any other as its name and value.
func custom(ev *streamEvent) string {
	var v struct {
		Call     string `json:"call"`
		Code     string `json:"code"`
		Message  string `json:"message"`
		ActionID string `json:"actionID"`
		Tool     string `json:"tool"`
		Risk     string `json:"risk"`
		Attempt  int    `json:"attempt"`
		Summary  string `json:"summary"`
		Decision string `json:"decision"`
		Approver string `json:"approver"`
		Comment  string `json:"comment"`
	}
	if json.Unmarshal(ev.Value, &v) != nil {
		return ev.Name + " " + truncate(compact(ev.Value), detailLimit)
	}
	switch ev.Name {
	case "agentrun.dev/refused":
		return fmt.Sprintf("refused %s: %s: %s", v.Call, v.Code, oneLine(v.Message))
	case "agentrun.dev/approval-requested":
		s := fmt.Sprintf("approval requested: %s (tool %s, risk %s, attempt %d)", v.ActionID, v.Tool, v.Risk, v.Attempt)
		if v.Summary != "" {
			s += " " + truncate(oneLine(v.Summary), detailLimit)
		}
		return s
	case "agentrun.dev/approval-decided":
		s := fmt.Sprintf("approval decided: %s %s", v.ActionID, v.Decision)
		if v.Approver != "" {
			s += " by " + v.Approver
		}
		if v.Comment != "" {
			s += ": " + strconv.Quote(v.Comment)
		}
		return s
	}
	return ev.Name + " " + truncate(compact(ev.Value), detailLimit)
}

// text decodes a JSON string (a delta); anything else is shown as JSON.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return compact(raw)
}

// content is a tool result's text: a string, or the text of its parts.
func content(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		texts := make([]string, 0, len(parts))
		for _, p := range parts {
			if p.Text != "" {
				texts = append(texts, p.Text)
			} else {
				texts = append(texts, "["+p.Type+"]")
			}
		}
		return strings.Join(texts, " ")
	}
	return compact(raw)
}

// patchText is a JSON Patch as "replace /phase "Finalizing"; remove /x".
func patchText(raw json.RawMessage) string {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(raw, &ops) != nil {
		return truncate(compact(raw), detailLimit)
	}
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		s := op.Op + " " + op.Path
		if len(op.Value) > 0 {
			s += " " + truncate(compact(op.Value), 120)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return oneLine(string(raw))
	}
	return b.String()
}
