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
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

const childEnv = "AGENTRUN_STREAM_TEST_NATS"

// TestMain doubles as a standalone NATS server for the crash tests: run with
// AGENTRUN_STREAM_TEST_NATS=<dir>,<listen>,<syncAlways> it serves JetStream
// from dir until killed, printing its client URL.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		parts := strings.Split(spec, ",")
		emb, err := StartEmbedded(Config{Dir: parts[0], Listen: parts[1], SyncAlways: parts[2] == "true"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(emb.ClientURL())
		select {}
	}
	os.Exit(m.Run())
}

// natsProcess is a NATS server in a child process, to be killed like a crash.
type natsProcess struct {
	cmd *exec.Cmd
	url string
}

func startNATSProcess(t testing.TB, dir, listen string, syncAlways bool) *natsProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%v", childEnv, dir, listen, syncAlways))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &natsProcess{cmd: cmd}
	t.Cleanup(p.kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("NATS child process: %v", err)
	}
	p.url = strings.TrimSpace(line)
	return p
}

// kill sends SIGKILL: no clean shutdown, no final flush.
func (p *natsProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" && cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var runA = stream.RunKey{Namespace: "team-a", Name: "survey.v2", UID: "uid-a"}
var runB = stream.RunKey{Namespace: "team-a", Name: "other", UID: "uid-b"}

func text(id, delta string) stream.Event {
	return stream.Event{Type: stream.TextMessageContent, MessageID: id, Delta: delta}
}

func final(i int) stream.Event {
	return stream.Event{Type: stream.StepStarted, StepName: fmt.Sprintf("step-%d", i)}
}

func mustPublish(t testing.TB, s *Store, run stream.RunKey, ev stream.Event) uint64 {
	t.Helper()
	seq, err := s.Publish(ctxT(t), run, ev)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func replayAll(t testing.TB, s *Store, run stream.RunKey, from uint64) []stream.Event {
	t.Helper()
	var got []stream.Event
	if err := s.Replay(ctxT(t), run, from, func(ev stream.Event) error {
		got = append(got, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func seqs(evs []stream.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
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

// readN reads n events from sub or fails after a timeout.
func readN(t testing.TB, sub *Subscription, n int) []stream.Event {
	t.Helper()
	var got []stream.Event
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				t.Fatalf("subscription closed after %d of %d events: %v", len(got), n, sub.Err())
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("got %d of %d events (seqs %v)", len(got), n, seqs(got))
		}
	}
	return got
}
