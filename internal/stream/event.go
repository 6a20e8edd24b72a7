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

package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EventType is an AG-UI event type: the JSON "type" discriminator.
type EventType string

// The AG-UI event types this stream carries (the names of @ag-ui/core's
// EventType enum). AG-UI's *_CHUNK shorthands, MESSAGES_SNAPSHOT, ACTIVITY_*,
// RAW, REASONING_ENCRYPTED_VALUE and SUBAGENT_* are not produced here, and
// Validate refuses them.
const (
	RunStarted  EventType = "RUN_STARTED"
	RunFinished EventType = "RUN_FINISHED"
	RunError    EventType = "RUN_ERROR"

	StepStarted  EventType = "STEP_STARTED"
	StepFinished EventType = "STEP_FINISHED"

	TextMessageStart   EventType = "TEXT_MESSAGE_START"
	TextMessageContent EventType = "TEXT_MESSAGE_CONTENT"
	TextMessageEnd     EventType = "TEXT_MESSAGE_END"

	ReasoningStart          EventType = "REASONING_START"
	ReasoningMessageStart   EventType = "REASONING_MESSAGE_START"
	ReasoningMessageContent EventType = "REASONING_MESSAGE_CONTENT"
	ReasoningMessageEnd     EventType = "REASONING_MESSAGE_END"
	ReasoningEnd            EventType = "REASONING_END"

	ToolCallStart  EventType = "TOOL_CALL_START"
	ToolCallArgs   EventType = "TOOL_CALL_ARGS"
	ToolCallEnd    EventType = "TOOL_CALL_END"
	ToolCallResult EventType = "TOOL_CALL_RESULT"

	StateSnapshot EventType = "STATE_SNAPSHOT"
	StateDelta    EventType = "STATE_DELTA"

	Custom EventType = "CUSTOM"
)

// Types lists every EventType this stream carries, in the order above.
var Types = []EventType{
	RunStarted, RunFinished, RunError,
	StepStarted, StepFinished,
	TextMessageStart, TextMessageContent, TextMessageEnd,
	ReasoningStart, ReasoningMessageStart, ReasoningMessageContent, ReasoningMessageEnd, ReasoningEnd,
	ToolCallStart, ToolCallArgs, ToolCallEnd, ToolCallResult,
	StateSnapshot, StateDelta,
	Custom,
}

// Known reports whether t is one of Types.
func (t EventType) Known() bool {
	switch t {
	case RunStarted, RunFinished, RunError, StepStarted, StepFinished,
		TextMessageStart, TextMessageContent, TextMessageEnd,
		ReasoningStart, ReasoningMessageStart, ReasoningMessageContent, ReasoningMessageEnd, ReasoningEnd,
		ToolCallStart, ToolCallArgs, ToolCallEnd, ToolCallResult,
		StateSnapshot, StateDelta, Custom:
		return true
	}
	return false
}

// IsDelta reports whether t is a mergeable delta: a fragment of a text,
// reasoning or tool-argument block (TEXT_MESSAGE_CONTENT,
// REASONING_MESSAGE_CONTENT, TOOL_CALL_ARGS). Every other type is final.
// STATE_DELTA is final: a JSON Patch is not a fragment of a block.
func (t EventType) IsDelta() bool {
	return t == TextMessageContent || t == ReasoningMessageContent || t == ToolCallArgs
}

// RunKey names the run an event belongs to: a ResearchRun's namespace,
// name and UID. Its text form (an event's "run") is "namespace/name"; the
// UID keys where its events are stored, so a run deleted and created again
// under its name never reads or continues the deleted one's stream.
type RunKey struct {
	Namespace string
	Name      string
	UID       string
}

// String returns "namespace/name".
func (k RunKey) String() string { return k.Namespace + "/" + k.Name }

// IsZero reports whether k names no run.
func (k RunKey) IsZero() bool { return k.Namespace == "" && k.Name == "" }

// Validate checks that all three parts are set and that none contains '/'.
func (k RunKey) Validate() error {
	if err := k.validateName(); err != nil {
		return err
	}
	if k.UID == "" || strings.Contains(k.UID, "/") {
		return fmt.Errorf("run key %q: the run's UID is required (a run's stream is keyed by its UID, so that a run "+
			"created again under the same name never shows the deleted one's events)", k.String())
	}
	return nil
}

func (k RunKey) validateName() error {
	if k.Namespace == "" || k.Name == "" {
		return fmt.Errorf("run key %q: namespace and name are both required", k.String())
	}
	if strings.Contains(k.Namespace, "/") || strings.Contains(k.Name, "/") {
		return fmt.Errorf("run key %q: namespace and name cannot contain '/'", k.String())
	}
	return nil
}

// ParseRunKey parses "namespace/name" (an event's "run": it has no UID).
func ParseRunKey(s string) (RunKey, error) {
	ns, name, ok := strings.Cut(s, "/")
	k := RunKey{Namespace: ns, Name: name}
	if !ok {
		return k, fmt.Errorf("run key %q: want namespace/name", s)
	}
	return k, k.validateName()
}

// Event is one AG-UI event of a run's stream. One flat struct serves every
// type; which fields a type uses, and their JSON names, follow @ag-ui/core
// (type, messageId, delta, toolCallId, toolCallName, …). MarshalJSON writes a
// type's required fields always (an empty delta is a valid delta) and its
// optional ones only when set, so the output validates against AG-UI's
// schemas; those are loose objects, so the two fields AG-UI lacks — seq and
// run — travel at the top level beside them.
type Event struct {
	// Type is the discriminator ("type").
	Type EventType
	// Seq is the per-run sequence number ("seq"), from 1, assigned by the
	// store's publisher; 0 before publication.
	Seq uint64
	// Run is the run the event belongs to ("run": "namespace/name"), set by
	// the publisher.
	Run RunKey
	// Timestamp is when the event was created, in milliseconds since the Unix
	// epoch ("timestamp"; optional).
	Timestamp int64

	// MessageID ("messageId") ties a text or reasoning block together, and
	// names the tool message a TOOL_CALL_RESULT mints.
	MessageID string
	// Role ("role"): TEXT_MESSAGE_START's author role (optional, AG-UI's
	// default is assistant); REASONING_MESSAGE_START's is always "reasoning";
	// TOOL_CALL_RESULT's is "tool" (optional).
	Role string
	// Name ("name"): TEXT_MESSAGE_START's optional author name; CUSTOM's
	// event name (required).
	Name string
	// Delta ("delta") is a text, reasoning or tool-argument fragment.
	Delta string

	// ToolCallID ("toolCallId") ties a tool call's START, ARGS, END and
	// RESULT together.
	ToolCallID string
	// ToolCallName ("toolCallName") is the tool TOOL_CALL_START calls.
	ToolCallName string
	// ParentMessageID ("parentMessageId") is the assistant message holding a
	// tool call (optional).
	ParentMessageID string
	// Content ("content") is a TOOL_CALL_RESULT's text.
	Content string
	// ContentParts, when set, is a TOOL_CALL_RESULT's content as an AG-UI
	// ContentPart array instead of text.
	ContentParts json.RawMessage

	// Snapshot ("snapshot") is a STATE_SNAPSHOT's state, any JSON value.
	Snapshot json.RawMessage
	// Patch is a STATE_DELTA's JSON Patch (RFC 6902), sent as "delta".
	Patch json.RawMessage

	// ThreadID and RunID ("threadId", "runId") are RUN_STARTED's and
	// RUN_FINISHED's required ids; ParentRunID ("parentRunId") is optional.
	ThreadID    string
	RunID       string
	ParentRunID string
	// Result ("result") and Outcome ("outcome", an AG-UI RunFinishedOutcome
	// object) are RUN_FINISHED's optional payload.
	Result  json.RawMessage
	Outcome json.RawMessage

	// Message ("message", required) and Code ("code", optional) describe a
	// RUN_ERROR.
	Message string
	Code    string

	// StepName ("stepName") names a STEP_STARTED / STEP_FINISHED.
	StepName string

	// Value ("value") is a CUSTOM event's payload, any JSON value.
	Value json.RawMessage

	// Metadata ("metadata") is AG-UI's open extra-information object.
	Metadata json.RawMessage

	// TTL is how long the store keeps the event (a JetStream per-message
	// TTL, whole seconds, at least one); 0 means the stream's MaxAge. It is
	// not part of the event's JSON: the producer sets it from the run's
	// policy (RuntimePolicy spec.events.maxAge), and a stored event read
	// back has none.
	TTL time.Duration `json:"-"`
}

// IsDelta reports whether e is a mergeable delta (see EventType.IsDelta).
func (e *Event) IsDelta() bool { return e.Type.IsDelta() }

// Final reports whether e must never be dropped: every event that is not a
// delta.
func (e *Event) Final() bool { return !e.Type.IsDelta() }

// Block returns the id of the block a delta belongs to (messageId for text
// and reasoning content, toolCallId for tool arguments), or "" for an event
// that is not a delta.
func (e *Event) Block() string {
	switch e.Type {
	case TextMessageContent, ReasoningMessageContent:
		return e.MessageID
	case ToolCallArgs:
		return e.ToolCallID
	}
	return ""
}

// Mergeable reports whether b can be folded into a, b immediately following
// a: both deltas of the same type and block, with the same metadata.
func Mergeable(a, b *Event) bool {
	return a.IsDelta() && a.Type == b.Type && a.Block() == b.Block() &&
		a.Run == b.Run && bytes.Equal(a.Metadata, b.Metadata)
}

// Merge folds b, the delta immediately after a, into a: the result carries
// a's text followed by b's, and b's seq and timestamp, so that a client
// resuming after it resumes after b; its TTL is a's. It returns false, and a unchanged, if
// the two are not Mergeable.
func Merge(a, b Event) (Event, bool) {
	if !Mergeable(&a, &b) {
		return a, false
	}
	a.Delta += b.Delta
	a.Seq = b.Seq
	a.Timestamp = b.Timestamp
	return a, true
}

// Size estimates the bytes e holds in memory, for queue bounds.
func (e *Event) Size() int {
	const overhead = 128
	return overhead + len(e.MessageID) + len(e.Role) + len(e.Name) + len(e.Delta) +
		len(e.ToolCallID) + len(e.ToolCallName) + len(e.ParentMessageID) + len(e.Content) +
		len(e.ContentParts) + len(e.Snapshot) + len(e.Patch) + len(e.ThreadID) + len(e.RunID) +
		len(e.ParentRunID) + len(e.Result) + len(e.Outcome) + len(e.Message) + len(e.Code) +
		len(e.StepName) + len(e.Value) + len(e.Metadata) + len(e.Run.Namespace) + len(e.Run.Name)
}

// ErrInvalidEvent is wrapped by every Validate error.
var ErrInvalidEvent = errors.New("invalid event")

// Validate checks that e's type is one this stream carries and that the
// fields AG-UI requires for it are set. It does not look at Seq or Run,
// which the publisher assigns.
func (e *Event) Validate() error {
	need := func(field, v string) error {
		if v == "" {
			return fmt.Errorf("%w: %s needs %s", ErrInvalidEvent, e.Type, field)
		}
		return nil
	}
	switch e.Type {
	case TextMessageStart, TextMessageContent, TextMessageEnd,
		ReasoningStart, ReasoningMessageStart, ReasoningMessageContent, ReasoningMessageEnd, ReasoningEnd:
		return need("messageId", e.MessageID)
	case ToolCallStart:
		return errors.Join(need("toolCallId", e.ToolCallID), need("toolCallName", e.ToolCallName))
	case ToolCallArgs, ToolCallEnd:
		return need("toolCallId", e.ToolCallID)
	case ToolCallResult:
		return errors.Join(need("messageId", e.MessageID), need("toolCallId", e.ToolCallID))
	case RunStarted, RunFinished:
		return errors.Join(need("threadId", e.ThreadID), need("runId", e.RunID))
	case RunError:
		return need("message", e.Message)
	case StepStarted, StepFinished:
		return need("stepName", e.StepName)
	case Custom:
		return need("name", e.Name)
	case StateSnapshot, StateDelta:
		return nil
	}
	return fmt.Errorf("%w: type %q is not one this stream carries", ErrInvalidEvent, e.Type)
}

// MarshalJSON writes e in AG-UI's shape: "type" first, then "seq" and "run"
// when set, the type's fields (required ones always), then "timestamp" and
// "metadata" when set.
func (e Event) MarshalJSON() ([]byte, error) {
	var w objWriter
	w.str("type", string(e.Type), true)
	if e.Seq != 0 {
		w.key("seq")
		w.buf = strconv.AppendUint(w.buf, e.Seq, 10)
	}
	if !e.Run.IsZero() {
		w.str("run", e.Run.String(), true)
	}
	switch e.Type {
	case TextMessageStart:
		w.str("messageId", e.MessageID, true)
		w.str("role", e.Role, false)
		w.str("name", e.Name, false)
	case TextMessageContent, ReasoningMessageContent:
		w.str("messageId", e.MessageID, true)
		w.str("delta", e.Delta, true)
	case TextMessageEnd, ReasoningStart, ReasoningMessageEnd, ReasoningEnd:
		w.str("messageId", e.MessageID, true)
	case ReasoningMessageStart:
		w.str("messageId", e.MessageID, true)
		w.str("role", "reasoning", true)
	case ToolCallStart:
		w.str("toolCallId", e.ToolCallID, true)
		w.str("toolCallName", e.ToolCallName, true)
		w.str("parentMessageId", e.ParentMessageID, false)
	case ToolCallArgs:
		w.str("toolCallId", e.ToolCallID, true)
		w.str("delta", e.Delta, true)
	case ToolCallEnd:
		w.str("toolCallId", e.ToolCallID, true)
	case ToolCallResult:
		w.str("messageId", e.MessageID, true)
		w.str("toolCallId", e.ToolCallID, true)
		if len(e.ContentParts) > 0 {
			w.raw("content", e.ContentParts, "")
		} else {
			w.str("content", e.Content, true)
		}
		w.str("role", e.Role, false)
	case StateSnapshot:
		w.raw("snapshot", e.Snapshot, "null")
	case StateDelta:
		w.raw("delta", e.Patch, "[]")
	case RunStarted:
		w.str("threadId", e.ThreadID, true)
		w.str("runId", e.RunID, true)
		w.str("parentRunId", e.ParentRunID, false)
	case RunFinished:
		w.str("threadId", e.ThreadID, true)
		w.str("runId", e.RunID, true)
		w.raw("result", e.Result, "")
		w.raw("outcome", e.Outcome, "")
	case RunError:
		w.str("message", e.Message, true)
		w.str("code", e.Code, false)
	case StepStarted, StepFinished:
		w.str("stepName", e.StepName, true)
	case Custom:
		w.str("name", e.Name, true)
		w.raw("value", e.Value, "null")
	default:
		return nil, fmt.Errorf("%w: type %q is not one this stream carries", ErrInvalidEvent, e.Type)
	}
	if e.Timestamp != 0 {
		w.key("timestamp")
		w.buf = strconv.AppendInt(w.buf, e.Timestamp, 10)
	}
	w.raw("metadata", e.Metadata, "")
	if w.err != nil {
		return nil, w.err
	}
	return append(w.buf, '}'), nil
}

// wireEvent is the union of every field's JSON form, for UnmarshalJSON.
type wireEvent struct {
	Type            EventType       `json:"type"`
	Seq             uint64          `json:"seq"`
	Run             string          `json:"run"`
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
	ParentRunID     string          `json:"parentRunId"`
	Result          json.RawMessage `json:"result"`
	Outcome         json.RawMessage `json:"outcome"`
	Message         string          `json:"message"`
	Code            string          `json:"code"`
	StepName        string          `json:"stepName"`
	Value           json.RawMessage `json:"value"`
	Metadata        json.RawMessage `json:"metadata"`
}

// UnmarshalJSON reads the form MarshalJSON writes (and any AG-UI event of the
// types this stream carries).
func (e *Event) UnmarshalJSON(data []byte) error {
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = Event{
		Type: w.Type, Seq: w.Seq, Timestamp: w.Timestamp,
		MessageID: w.MessageID, Role: w.Role, Name: w.Name,
		ToolCallID: w.ToolCallID, ToolCallName: w.ToolCallName, ParentMessageID: w.ParentMessageID,
		Snapshot: w.Snapshot, ThreadID: w.ThreadID, RunID: w.RunID, ParentRunID: w.ParentRunID,
		Result: w.Result, Outcome: w.Outcome, Message: w.Message, Code: w.Code,
		StepName: w.StepName, Value: w.Value, Metadata: w.Metadata,
	}
	if w.Run != "" {
		k, err := ParseRunKey(w.Run)
		if err != nil {
			return err
		}
		e.Run = k
	}
	if w.Type == ReasoningMessageStart {
		e.Role = ""
	}
	if w.Type == StateDelta {
		e.Patch = w.Delta
	} else if len(w.Delta) > 0 {
		if err := json.Unmarshal(w.Delta, &e.Delta); err != nil {
			return fmt.Errorf("%s delta: %w", w.Type, err)
		}
	}
	if len(w.Content) > 0 {
		if w.Content[0] == '"' {
			if err := json.Unmarshal(w.Content, &e.Content); err != nil {
				return fmt.Errorf("%s content: %w", w.Type, err)
			}
		} else {
			e.ContentParts = w.Content
		}
	}
	return nil
}

// objWriter appends the members of one JSON object.
type objWriter struct {
	buf []byte
	err error
}

func (w *objWriter) key(k string) {
	if len(w.buf) == 0 {
		w.buf = append(w.buf, '{')
	} else {
		w.buf = append(w.buf, ',')
	}
	w.buf = strconv.AppendQuote(w.buf, k)
	w.buf = append(w.buf, ':')
}

// str writes k: v, or nothing if v is empty and not required.
func (w *objWriter) str(k, v string, required bool) {
	if v == "" && !required {
		return
	}
	w.key(k)
	b, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.buf = append(w.buf, b...)
}

// raw writes k: v after checking v is valid JSON; an empty v is written as
// def, or omitted if def is "".
func (w *objWriter) raw(k string, v json.RawMessage, def string) {
	if len(v) == 0 {
		if def == "" {
			return
		}
		v = json.RawMessage(def)
	}
	if !json.Valid(v) {
		if w.err == nil {
			w.err = fmt.Errorf("%w: %s is not valid JSON", ErrInvalidEvent, k)
		}
		return
	}
	w.key(k)
	var c bytes.Buffer
	if err := json.Compact(&c, v); err != nil {
		if w.err == nil {
			w.err = err
		}
		return
	}
	w.buf = append(w.buf, c.Bytes()...)
}
