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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// SeqHeader carries an event's per-run seq beside its JSON, so that reading
// a position needs no decoding.
const SeqHeader = "Agentrun-Seq"

// maxConflicts bounds how often one Publish takes the next seq after another
// producer of the same run got there first.
const maxConflicts = 16

// maxTrackedRuns bounds the publisher's per-run cache; forgetting a run only
// costs one read of its last event on its next publish.
const maxTrackedRuns = 10_000

// Store is a run-stream store on one JetStream stream.
type Store struct {
	cfg Config
	emb *Embedded // started by Open, shut down by Close; nil for an external URL
	nc  *nats.Conn
	js  jetstream.JetStream
	st  jetstream.Stream

	mu   sync.Mutex
	runs map[string]*runState

	// noTTL: the stream refuses per-event TTLs (created without
	// AllowMsgTTL, by an older stream server); publish without them.
	noTTL atomic.Bool
}

// runState is what the publisher knows of a run's subject: the last seq and
// the JetStream sequence of the message that holds it.
type runState struct {
	mu        sync.Mutex
	loaded    bool
	seq       uint64
	streamSeq uint64
}

// Open connects to cfg.URL, or starts an embedded server storing in cfg.Dir,
// and creates or updates the stream with cfg's limits.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, runs: map[string]*runState{}}
	opts := []nats.Option{
		nats.Name("agentrun-stream"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	url := cfg.URL
	if url == "" {
		emb, err := StartEmbedded(cfg)
		if err != nil {
			return nil, err
		}
		s.emb = emb
		// In process, never over TLS: the server does not require it of an in-process client,
		// and a tls:// URL (ClientURL's with ListenTLS) would make the client verify the
		// listener's certificate against the wildcard address it names, and fail.
		url = strings.Replace(emb.ClientURL(), "tls://", "nats://", 1)
		opts = append(opts, nats.InProcessServer(emb.Server()))
	} else {
		opts = append(opts, nats.RetryOnFailedConnect(false))
		opts = append(opts, cfg.NATSOptions...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		s.shutdownEmbedded()
		return nil, fmt.Errorf("stream store: connect: %w", err)
	}
	s.nc = nc
	if s.js, err = jetstream.New(nc); err != nil {
		s.Close()
		return nil, fmt.Errorf("stream store: %w", err)
	}
	if cfg.Attach {
		s.st, err = s.js.Stream(ctx, cfg.Stream)
	} else {
		s.st, err = s.js.CreateOrUpdateStream(ctx, streamConfig(cfg))
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("stream store: stream %s: %w", cfg.Stream, err)
	}
	return s, nil
}

func streamConfig(cfg Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              cfg.Stream,
		Description:       "agentrun run stream: one subject per run, AG-UI events with a per-run seq",
		Subjects:          []string{cfg.SubjectPrefix + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: cfg.MaxEventsPerRun,
		MaxBytes:          cfg.MaxBytes,
		MaxAge:            cfg.MaxAge,
		MaxMsgSize:        cfg.MaxEventBytes,
		Duplicates:        cfg.DuplicateWindow,
		Replicas:          cfg.Replicas,
		// Every subscription and export holds a consumer while it reads:
		// without a limit of its own the stream gets the server's default
		// of 1,000 for the whole installation.
		MaxConsumers: cfg.MaxConsumers,
		// Per-event TTLs (Event.TTL: a policy's spec.events.maxAge).
		AllowMsgTTL: true,
	}
}

// Close closes the connection and stops the embedded server, if Open
// started one.
func (s *Store) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.shutdownEmbedded()
}

func (s *Store) shutdownEmbedded() {
	if s.emb != nil {
		s.emb.Shutdown()
	}
}

// Embedded is the in-process server Open started, or nil.
func (s *Store) Embedded() *Embedded { return s.emb }

// Conn is the store's NATS connection.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Subject is the run's subject in this store.
func (s *Store) Subject(run stream.RunKey) string { return Subject(s.cfg.SubjectPrefix, run) }

func (s *Store) runState(subj string) *runState {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.runs[subj]
	if !ok {
		if len(s.runs) >= maxTrackedRuns {
			// Forget half, arbitrarily: a forgotten run reloads its last seq.
			n := 0
			for k := range s.runs {
				if n++; n > maxTrackedRuns/2 {
					break
				}
				delete(s.runs, k)
			}
		}
		rs = &runState{}
		s.runs[subj] = rs
	}
	return rs
}

// Publish stores ev as the run's next event and returns its seq once
// JetStream has acknowledged it. It sets ev's Run, its Seq and, if zero, its
// Timestamp. To retry a failed Publish idempotently, pass the same event
// with its Timestamp set: if the first attempt had landed, the retry returns
// its seq instead of storing it again. An ev.TTL above zero is the stored
// event's JetStream TTL (see PublishTTL); it is not part of the bytes a
// retry is recognized by.
func (s *Store) Publish(ctx context.Context, run stream.RunKey, ev stream.Event) (uint64, error) {
	if err := run.Validate(); err != nil {
		return 0, err
	}
	if err := ev.Validate(); err != nil {
		return 0, err
	}
	ev.Run = run
	if ev.Timestamp == 0 {
		ev.Timestamp = s.cfg.Clock().UnixMilli()
	}
	subj := s.Subject(run)
	rs := s.runState(subj)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.loaded {
		if err := s.loadLast(ctx, subj, rs); err != nil {
			return 0, s.failed(err)
		}
	}
	for range maxConflicts {
		ev.Seq = rs.seq + 1
		data, err := json.Marshal(ev)
		if err != nil {
			return 0, err
		}
		msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
		msg.Header.Set(SeqHeader, strconv.FormatUint(ev.Seq, 10))
		ack, err := s.publishMsg(ctx, msg, ev.TTL,
			jetstream.WithMsgID(MsgID(run, ev.Seq)),
			jetstream.WithExpectStream(s.cfg.Stream),
			jetstream.WithExpectLastSequencePerSubject(rs.streamSeq))
		if err == nil {
			rs.seq, rs.streamSeq = ev.Seq, ack.Sequence
			if m := s.cfg.Metrics; m != nil {
				m.Published.WithLabelValues(kindOf(ev.IsDelta())).Inc()
			}
			return ev.Seq, nil
		}
		if !isWrongLastSequence(err) {
			return 0, s.failed(fmt.Errorf("stream store: publish %s seq %d: %w", run, ev.Seq, err))
		}
		// The subject moved on since we last saw it: an earlier attempt of
		// this very event landed (its answer lost), or another producer of the
		// run published. The message right after the one we knew tells which.
		prev := rs.streamSeq
		if m, err := s.st.GetMsg(ctx, prev+1, jetstream.WithGetMsgSubject(subj)); err == nil &&
			headerSeq(m) == ev.Seq && bytes.Equal(m.Data, data) {
			if err := s.loadLast(ctx, subj, rs); err != nil {
				return 0, s.failed(err)
			}
			return ev.Seq, nil
		}
		if err := s.loadLast(ctx, subj, rs); err != nil {
			return 0, s.failed(err)
		}
		if m := s.cfg.Metrics; m != nil {
			m.SeqConflicts.Inc()
		}
	}
	return 0, s.failed(fmt.Errorf("stream store: publish %s: seq still contended after %d attempts", run, maxConflicts))
}

func (s *Store) failed(err error) error {
	if m := s.cfg.Metrics; m != nil {
		m.PublishErrors.Inc()
	}
	return err
}

// loadLast reads the subject's last event into rs (zero if it has none).
func (s *Store) loadLast(ctx context.Context, subj string, rs *runState) error {
	m, err := s.st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		rs.seq, rs.streamSeq, rs.loaded = 0, 0, true
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream store: last event of %s: %w", subj, err)
	}
	rs.seq, rs.streamSeq, rs.loaded = headerSeq(m), m.Sequence, true
	return nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// headerSeq is a stored message's per-run seq (0 if it has none).
func headerSeq(m *jetstream.RawStreamMsg) uint64 {
	n, _ := strconv.ParseUint(m.Header.Get(SeqHeader), 10, 64)
	return n
}

// Bounds are the seqs of a run's oldest and last stored events; both 0 when
// it has none.
type Bounds struct {
	Oldest uint64
	Last   uint64
}

// Bounds returns the run's oldest and last stored seqs. Events before Oldest
// have left the retention window.
func (s *Store) Bounds(ctx context.Context, run stream.RunKey) (Bounds, error) {
	if err := run.Validate(); err != nil {
		return Bounds{}, err
	}
	subj := s.Subject(run)
	first, err := s.st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Bounds{}, nil
	}
	if err != nil {
		return Bounds{}, fmt.Errorf("stream store: oldest event of %s: %w", run, err)
	}
	last, err := s.st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return Bounds{}, fmt.Errorf("stream store: last event of %s: %w", run, err)
	}
	return Bounds{Oldest: headerSeq(first), Last: headerSeq(last)}, nil
}

// Last returns the run's last stored event and when it was stored (not
// when it was emitted: a producer's backlog stores old events late); ok is
// false if the run has none.
func (s *Store) Last(ctx context.Context, run stream.RunKey) (ev stream.Event, stored time.Time, ok bool, err error) {
	if err := run.Validate(); err != nil {
		return ev, stored, false, err
	}
	m, err := s.st.GetLastMsgForSubject(ctx, s.Subject(run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ev, stored, false, nil
	}
	if err != nil {
		return ev, stored, false, fmt.Errorf("stream store: last event of %s: %w", run, err)
	}
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return ev, stored, false, fmt.Errorf("stream store: last event of %s: %w", run, err)
	}
	ev.Run = run
	return ev, m.Time, true, nil
}

// Oldest returns the seq of the run's oldest stored event, 0 if none.
func (s *Store) Oldest(ctx context.Context, run stream.RunKey) (uint64, error) {
	b, err := s.Bounds(ctx, run)
	return b.Oldest, err
}

// startAfter returns the JetStream sequence to deliver the subject from so
// that the first event delivered is the first stored one with seq > after:
// a binary search over stream positions (a run's seqs grow with them), a
// few reads however long the run.
func (s *Store) startAfter(ctx context.Context, subj string, after uint64) (uint64, error) {
	first, err := s.st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	if headerSeq(first) > after {
		return first.Sequence, nil
	}
	last, err := s.st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return 0, err
	}
	if headerSeq(last) <= after {
		return last.Sequence + 1, nil
	}
	// The next event at or after lo has seq <= after; at or after hi, > after.
	lo, hi := first.Sequence, last.Sequence
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		m, err := s.st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			return 0, err
		}
		if headerSeq(m) > after {
			hi = mid
		} else {
			lo = m.Sequence
		}
	}
	return hi, nil
}

func (s *Store) consume(ctx context.Context, subj string, start uint64) (*messages, error) {
	cons, err := s.st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subj},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: consumerInactive,
	})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return nil, err
	}
	return &messages{MessagesContext: it, s: s, cons: cons}, nil
}

// consumerInactive is how long the server keeps the consumer of a reader
// that went away without stopping (a crashed process); a reader that stops
// deletes its consumer at once.
const consumerInactive = 15 * time.Second

// messages is a reader's message iterator; Stop also deletes its consumer,
// so that readers that come and go do not pile consumers up to the
// stream's limit.
type messages struct {
	jetstream.MessagesContext
	s    *Store
	cons jetstream.Consumer
}

func (m *messages) Stop() {
	m.MessagesContext.Stop()
	info := m.cons.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.s.cfg.PublishTimeout)
	defer cancel()
	_ = m.s.st.DeleteConsumer(ctx, info.Name)
}

// Replay calls fn with the run's stored events from seq from (1 or 0 for
// the whole retained trajectory) to the last one stored when Replay began,
// in order, then returns. It stops at fn's first error and returns it.
func (s *Store) Replay(ctx context.Context, run stream.RunKey, from uint64, fn func(stream.Event) error) error {
	if err := run.Validate(); err != nil {
		return err
	}
	subj := s.Subject(run)
	last, err := s.st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream store: last event of %s: %w", run, err)
	}
	if from == 0 {
		from = 1
	}
	if headerSeq(last) < from {
		return nil
	}
	start, err := s.startAfter(ctx, subj, from-1)
	if err != nil {
		return fmt.Errorf("stream store: replay %s: %w", run, err)
	}
	it, err := s.consume(ctx, subj, start)
	if err != nil {
		return fmt.Errorf("stream store: replay %s: %w", run, err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("stream store: replay %s: %w", run, err)
		}
		var ev stream.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return fmt.Errorf("stream store: replay %s: %w", run, err)
		}
		ev.Run = run
		if ev.Seq >= from {
			if err := fn(ev); err != nil {
				return err
			}
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("stream store: replay %s: %w", run, err)
		}
		if md.Sequence.Stream >= last.Sequence {
			return nil
		}
	}
}

// Subscription is a run's events after a seq: the stored ones, then the
// live tail, each once, in order.
type Subscription struct {
	// C yields the events; it is closed when the subscription's context ends
	// or reading fails (then Err says why).
	C <-chan stream.Event

	mu  sync.Mutex
	err error
}

// Err is why C was closed, nil if by the context. Valid once C is closed.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Subscribe yields the run's events with seq > after — the stored ones,
// then each new one as it is stored — without gap or duplicate, until ctx
// ends. The channel has a small buffer; a reader that stops reading stalls
// only its own subscription.
func (s *Store) Subscribe(ctx context.Context, run stream.RunKey, after uint64) (*Subscription, error) {
	if err := run.Validate(); err != nil {
		return nil, err
	}
	subj := s.Subject(run)
	start, err := s.startAfter(ctx, subj, after)
	if err != nil {
		return nil, fmt.Errorf("stream store: subscribe %s: %w", run, err)
	}
	it, err := s.consume(ctx, subj, start)
	if err != nil {
		return nil, fmt.Errorf("stream store: subscribe %s: %w", run, err)
	}
	ch := make(chan stream.Event, 64)
	sub := &Subscription{C: ch}
	fail := func(err error) {
		if ctx.Err() == nil {
			sub.mu.Lock()
			sub.err = fmt.Errorf("stream store: subscription to %s: %w", run, err)
			sub.mu.Unlock()
		}
	}
	go func() {
		defer close(ch)
		defer it.Stop()
		last := after
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				fail(err)
				return
			}
			var ev stream.Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				fail(err)
				return
			}
			ev.Run = run
			if ev.Seq <= last {
				continue
			}
			last = ev.Seq
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return sub, nil
}
