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
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// Defaults of Config.
const (
	DefaultStream          = "AGENTRUN_EVENTS"
	DefaultSubjectPrefix   = "agentrun.events"
	DefaultMaxEventsPerRun = 100_000
	DefaultMaxBytes        = 1 << 30
	DefaultMaxAge          = 7 * 24 * time.Hour
	DefaultMaxEventBytes   = 1 << 20
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultPublishTimeout  = 5 * time.Second
	DefaultMaxConsumers    = 100_000
)

// Config configures the store. The zero value, with Dir set, is an embedded
// server with the defaults above.
type Config struct {
	// URL is an external NATS server or cluster (nats://host:4222,…). Empty
	// runs NATS in process (see Embedded), storing in Dir.
	URL string
	// Dir is the embedded server's JetStream store directory.
	Dir string
	// Listen, if set (host:port, port 0 for any), lets the embedded server
	// also accept network clients there; by default it accepts none.
	Listen string

	// Stream is the JetStream stream's name.
	Stream string
	// SubjectPrefix is the subject prefix; a run's subject is
	// <prefix>.<namespace>.<name>.
	SubjectPrefix string

	// MaxEventsPerRun bounds each run's subject (JetStream
	// MaxMsgsPerSubject); the oldest events go first.
	MaxEventsPerRun int64
	// MaxBytes bounds the whole stream (JetStream has no per-subject byte
	// limit); the oldest events of any run go first.
	MaxBytes int64
	// MaxAge drops events older than this. Keep it longer than a run lives:
	// a run whose every event has expired starts again at seq 1.
	MaxAge time.Duration
	// MaxEventBytes refuses larger events (JetStream MaxMsgSize).
	MaxEventBytes int32
	// DuplicateWindow is how long a Nats-Msg-Id is remembered.
	DuplicateWindow time.Duration
	// Replicas of the stream on an external cluster (1 when embedded).
	Replicas int
	// MaxConsumers bounds the readers (SSE subscriptions, exports, replays)
	// open at once over the whole stream: each holds one consumer.
	MaxConsumers int
	// Attach binds to the stream as it exists instead of creating or
	// updating it: for producers (the gateway) that must not change the
	// retention the stream server configured. Open fails while it does not
	// exist yet.
	Attach bool
	// NATSOptions are added to the client connection's options (TLS, creds)
	// for an external server.
	NATSOptions []nats.Option
	// ListenTLS, with Listen, makes the embedded server's network listener
	// TLS; with ClientCAs set and ClientAuth RequireAndVerifyClientCert, a
	// client must present a certificate those CAs signed.
	ListenTLS *tls.Config

	// SyncAlways (embedded only) fsyncs every write before the publish is
	// acknowledged: an acknowledged event survives a power loss or kernel
	// crash, about 30× slower than the default. Without it an acknowledged
	// event is written to the store file (write(2)) before the ack — it
	// survives a crash of the server process — and fsynced every
	// SyncInterval.
	SyncAlways bool
	// SyncInterval (embedded only) is the background fsync period; 0 means
	// NATS's default, two minutes.
	SyncInterval time.Duration

	// PublishTimeout bounds one publish (each attempt).
	PublishTimeout time.Duration
	// Clock stamps events without a timestamp; time.Now by default.
	Clock func() time.Time
	// Metrics, if set, counts publishes.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	if c.MaxEventsPerRun == 0 {
		c.MaxEventsPerRun = DefaultMaxEventsPerRun
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxConsumers == 0 {
		c.MaxConsumers = DefaultMaxConsumers
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.URL == "" && c.Dir == "" {
		return errors.New("stream store: set URL (external NATS) or Dir (embedded store directory)")
	}
	if strings.ContainsAny(c.SubjectPrefix, " *>") || strings.HasSuffix(c.SubjectPrefix, ".") {
		return fmt.Errorf("stream store: subject prefix %q is not a literal subject", c.SubjectPrefix)
	}
	return nil
}

// Subject returns the run's subject, <prefix>.<namespace>.<name>.<uid>, each
// of the three tokens escaped by EscapeToken. The UID makes a run created
// again under a deleted one's name a subject of its own. (Before the UID
// token, subjects were <prefix>.<namespace>.<name>: LegacySubjects matches
// them.)
func Subject(prefix string, run stream.RunKey) string {
	return prefix + "." + EscapeToken(run.Namespace) + "." + EscapeToken(run.Name) + "." + EscapeToken(run.UID)
}

// LegacySubjects is the filter of the subjects that earlier versions keyed
// by name alone (<prefix>.<namespace>.<name>): no run reads them any more.
func LegacySubjects(prefix string) string { return prefix + ".*.*" }

// EscapeToken makes s one subject token: lowercase letters, digits and '-'
// pass; every other byte, '_' included, becomes _xx (its hex). Distinct
// names give distinct tokens; a Kubernetes name's dots become _2e.
func EscapeToken(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
	}
	return b.String()
}

// MsgID is the Nats-Msg-Id of a run's event seq: with the run's UID, so a
// run created again under its name within the duplicate window is not
// taken for the deleted one's retry.
func MsgID(run stream.RunKey, seq uint64) string {
	return fmt.Sprintf("%s/%s/%d", run.String(), run.UID, seq)
}
