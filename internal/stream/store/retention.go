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

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// Per-run retention beside the stream-wide limits (Config): an event's age
// by its JetStream TTL (Event.TTL, set per publish), a run's bytes by Trim.

// MinTTL is JetStream's shortest per-message TTL; PublishTTL raises a
// shorter positive TTL to it.
const MinTTL = time.Second

// MsgSizeHeader is the header in which a headers-only consumer delivers a
// message's payload size.
const MsgSizeHeader = "Nats-Msg-Size"

// jsErrTTLDisabled is JetStream's "per-message TTL is disabled" error code:
// the stream was created without AllowMsgTTL.
const jsErrTTLDisabled jetstream.ErrorCode = 10166

// PublishTTL is the TTL Publish stores an event with: ttl raised to MinTTL
// if shorter, 0 (the stream's MaxAge) if not positive. JetStream counts
// whole seconds, and the stream's MaxAge still bounds every event.
func PublishTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 0
	}
	return max(ttl, MinTTL)
}

// publishMsg publishes one message with the event's TTL, if any, within
// the publish timeout. A stream that refuses TTLs (created by an older
// stream server without AllowMsgTTL) gets the message without one, and
// from then on every message: its MaxAge alone applies.
func (s *Store) publishMsg(ctx context.Context, msg *nats.Msg, ttl time.Duration, opts ...jetstream.PublishOpt,
) (*jetstream.PubAck, error) {
	ttl = PublishTTL(ttl)
	for {
		o := opts
		if ttl > 0 && !s.noTTL.Load() {
			o = append(slices.Clip(o), jetstream.WithMsgTTL(ttl))
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
		ack, err := s.js.PublishMsg(pctx, msg, o...)
		cancel()
		var apiErr *jetstream.APIError
		if ttl > 0 && !s.noTTL.Load() && errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrTTLDisabled {
			s.noTTL.Store(true)
			msg.Header.Del(jetstream.MsgTTLHeader) // WithMsgTTL set it on msg
			continue
		}
		return ack, err
	}
}

// Trim bounds the run's stored events to maxBytes bytes of JSON (their
// payloads, as Replay returns them; JetStream's headers and per-message
// overhead are not counted) by removing its oldest events — never its
// last one, so that its seq keeps counting — and returns how many it
// removed. It reads the run's subject once with a headers-only consumer
// (each message's size arrives in its Nats-Msg-Size header, not its body),
// then purges the subject below the first event it keeps. Events stored
// while it runs are kept. A reader resuming before the new oldest event
// gets Bounds' answer: its Last-Event-ID has left the retention window.
func (s *Store) Trim(ctx context.Context, run stream.RunKey, maxBytes int64) (uint64, error) {
	if err := run.Validate(); err != nil {
		return 0, err
	}
	if maxBytes <= 0 {
		return 0, fmt.Errorf("stream store: trim %s: maxBytes %d is not positive", run, maxBytes)
	}
	subj := s.Subject(run)
	sizes, err := s.sizes(ctx, subj)
	if err != nil {
		return 0, fmt.Errorf("stream store: trim %s: %w", run, err)
	}
	var total int64
	for _, m := range sizes {
		total += m.size
	}
	// Drop from the oldest while over the bound, keeping at least the last.
	cut := 0
	for cut < len(sizes)-1 && total > maxBytes {
		total -= sizes[cut].size
		cut++
	}
	if cut == 0 {
		return 0, nil
	}
	// Purge removes the subject's messages below the first one kept.
	if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(sizes[cut].seq)); err != nil {
		return 0, fmt.Errorf("stream store: trim %s: purge below %d: %w", run, sizes[cut].seq, err)
	}
	if m := s.cfg.Metrics; m != nil && m.Trimmed != nil {
		m.Trimmed.Add(float64(cut))
	}
	return uint64(cut), nil
}

// msgSize is one stored message: its stream sequence and payload bytes.
type msgSize struct {
	seq  uint64
	size int64
}

// trimIdle bounds the wait for the next message of a scan: the messages
// it expected may have expired (TTL) meanwhile.
const trimIdle = 2 * time.Second

// sizes lists the subject's messages, oldest first, up to its last one when
// the scan began: a headers-only ordered consumer, so no payload is read.
func (s *Store) sizes(ctx context.Context, subj string) ([]msgSize, error) {
	last, err := s.st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cons, err := s.st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subj},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		HeadersOnly:       true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	var out []msgSize
	for {
		nctx, cancel := context.WithTimeout(ctx, trimIdle)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				// Nothing more arrived: the rest expired while we read.
				return out, nil
			}
			return nil, err
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		size, err := strconv.ParseInt(msg.Headers().Get(MsgSizeHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("message %d has no %s header: %w", md.Sequence.Stream, MsgSizeHeader, err)
		}
		out = append(out, msgSize{seq: md.Sequence.Stream, size: size})
		if md.Sequence.Stream >= last.Sequence || md.NumPending == 0 {
			return out, nil
		}
	}
}
