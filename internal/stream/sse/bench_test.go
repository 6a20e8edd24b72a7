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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// BenchmarkPublishToClientLatency: from the call to Publish to the SSE
// client having parsed the event, one event at a time paced at 1 ms, over a
// loopback HTTP connection to an embedded store; p50 and p99 reported.
func BenchmarkPublishToClientLatency(b *testing.B) {
	f := newFixture(b, store.Config{}, Options{})
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	resp := f.get(ctx, f.url(runA, "after=0"), nil)
	defer func() { _ = resp.Body.Close() }()
	rd := newSSEReader(resp.Body)
	// Each run of the benchmark has a fresh store: event i has seq i+1.
	sent := make([]atomic.Int64, b.N+1)
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(lat) < b.N {
			m, err := rd.next()
			if err != nil {
				b.Error(err)
				return
			}
			seq, _ := strconv.ParseUint(m.id, 10, 64)
			lat = append(lat, time.Duration(time.Now().UnixNano()-sent[seq].Load()))
		}
	}()
	b.ResetTimer()
	for i := range b.N {
		sent[i+1].Store(time.Now().UnixNano())
		if _, err := f.store.Publish(ctx, runA, stream.Event{Type: stream.TextMessageContent, MessageID: "m", Delta: strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	<-done
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkResume: the cost of a reconnect with Last-Event-ID into a long
// run — from the request to the first event parsed by the client, over
// loopback HTTP (a new connection each time): the authorizer, the run
// lookup, store.Bounds, the binary search over stream positions for the
// start, a new ordered consumer. "store" is the store's part alone
// (Subscribe to the first event on its channel); "Bounds" (two reads of
// one message) gives the cost of one of the search's reads. Between
// iterations, off
// the clock, the consumers left behind are deleted: a stopped ordered
// consumer stays on the server until its inactive threshold (a minute), and
// the server allows 1,000 consumers per stream by default.
func BenchmarkResume(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		f := newFixture(b, store.Config{}, Options{})
		ctx := context.Background()
		for i := range n {
			id := "m-" + strconv.Itoa(i/(benchDeltas+2))
			ev := stream.Event{Type: stream.TextMessageContent, MessageID: id, Delta: benchDeltaText}
			switch i % (benchDeltas + 2) {
			case 0:
				ev = stream.Event{Type: stream.TextMessageStart, MessageID: id, Role: "assistant"}
			case benchDeltas + 1:
				ev = stream.Event{Type: stream.TextMessageEnd, MessageID: id}
			}
			f.publish(runA, ev)
		}
		b.Run(fmt.Sprintf("events=%d/Bounds", n), func(b *testing.B) {
			for b.Loop() {
				if bd, err := f.store.Bounds(ctx, runA); err != nil || bd.Last != uint64(n) {
					b.Fatal(bd, err)
				}
			}
		})
		for _, from := range []struct {
			name  string
			after uint64
		}{{"near-end", uint64(n - 10)}, {"middle", uint64(n / 2)}} {
			b.Run(fmt.Sprintf("events=%d/from=%s/via=sse", n, from.name), func(b *testing.B) {
				header := map[string]string{"Last-Event-ID": strconv.FormatUint(from.after, 10)}
				for range b.N {
					rctx, cancel := context.WithCancel(ctx)
					resp := f.get(rctx, f.url(runA, ""), header)
					m, err := newSSEReader(resp.Body).next()
					cancel()
					_ = resp.Body.Close()
					if err != nil || m.ev.Seq != from.after+1 {
						b.Fatalf("first event %+v, %v; want seq %d", m.ev, err, from.after+1)
					}
					b.StopTimer()
					deleteConsumers(b, f.store)
					b.StartTimer()
				}
			})
			b.Run(fmt.Sprintf("events=%d/from=%s/via=store", n, from.name), func(b *testing.B) {
				for range b.N {
					sctx, cancel := context.WithCancel(ctx)
					sub, err := f.store.Subscribe(sctx, runA, from.after)
					if err != nil {
						b.Fatal(err)
					}
					ev, ok := <-sub.C
					cancel()
					b.StopTimer()
					for range sub.C { //nolint:revive // drain
					}
					if !ok || ev.Seq != from.after+1 {
						b.Fatalf("first event %+v; want seq %d", ev, from.after+1)
					}
					deleteConsumers(b, f.store)
					b.StartTimer()
				}
			})
		}
	}
}

// deleteConsumers deletes the store stream's consumers.
func deleteConsumers(b *testing.B, s *store.Store) {
	ctx := context.Background()
	js, err := jetstream.New(s.Conn())
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(ctx, store.DefaultStream)
	if err != nil {
		b.Fatal(err)
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if err := st.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			b.Fatal(err)
		}
	}
	if err := names.Err(); err != nil {
		b.Fatal(err)
	}
}

// benchClientsEnv makes the test binary the client side of
// BenchmarkSubscribers1000 (see TestMain): the subscribers run in a child
// process so that the parent's heap is the server's alone.
const benchClientsEnv = "AGENTRUN_SSE_BENCH_CLIENTS"

// TestMain doubles as the subscribers of BenchmarkSubscribers1000: run with
// AGENTRUN_SSE_BENCH_CLIENTS=<clientsSpec JSON> it opens the subscriptions,
// prints "ready", reads "end <lastSeq> <finals>" on stdin, waits for the
// fast clients to get there and prints "stats <clientsStats JSON>".
func TestMain(m *testing.M) {
	if spec := os.Getenv(benchClientsEnv); spec != "" {
		if err := runBenchClients(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench clients:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The workload of BenchmarkSubscribers1000.
const (
	benchFast, benchSlow = 900, 100
	// Events are published in blocks of one TEXT_MESSAGE_START, benchDeltas
	// TEXT_MESSAGE_CONTENT of benchDeltaText and one TEXT_MESSAGE_END.
	benchDeltas = 50
	// A slow client reads 100× slower than the stream is written.
	benchSlowdown = 100
)

var (
	benchRate = flag.Int("sse.rate", 20,
		"BenchmarkSubscribers1000: events/s published (the default is below the fan-out ceiling on 2 cores, see docs/stream.md)")
	benchLagBlocks = flag.Int("sse.lag-blocks", 3,
		"BenchmarkSubscribers1000: N in blocks; the heap is measured after N, 2N, 4N and 8N")
)

var benchDeltaText = strings.Repeat("token ", 5) // 30 bytes, a few tokens

// BenchmarkSubscribers1000: one run publishing a steady stream (-sse.rate
// events/s) to 1,000 SSE subscribers over loopback HTTP, of which 100 read
// 100× slower than it is written and 900 read at full speed; the
// subscribers are a child process, so the heap measured is the server's
// (handler, HTTP server, store and embedded NATS). It reports the server's
// heap in use after GC above its heap before any subscriber — connected and
// idle, and after N and 4N events (-sse.lag-blocks; more points are logged)
// — the queues' peak, the publish latency, the fast clients' delivered
// events/s and share of finals, and the slow clients' reconnects. Run with
// -benchtime 1x: one iteration takes about a minute.
func BenchmarkSubscribers1000(b *testing.B) {
	raiseFileLimit(b, 2*(benchFast+benchSlow)+512)
	// The per-subscriber bounds at their defaults, spelled out.
	f := newFixture(b, store.Config{}, Options{QueueEvents: 256, QueueBytes: 1 << 20})
	delta := stream.Event{Type: stream.TextMessageContent, Run: runA, Seq: 1000, MessageID: "m-1000", Delta: benchDeltaText, Timestamp: time.Now().UnixMilli()}
	start := stream.Event{Type: stream.TextMessageStart, Run: runA, Seq: 1000, MessageID: "m-1000", Role: "assistant", Timestamp: delta.Timestamp}
	frameBytes := float64(benchDeltas*len(frame("1000", delta))+2*len(frame("1000", start))) / (benchDeltas + 2)
	spec, _ := json.Marshal(clientsSpec{
		URL: f.url(runA, ""), Fast: benchFast, Slow: benchSlow,
		SlowBytesPerSec: float64(*benchRate) * frameBytes / benchSlowdown,
	})
	for range b.N {
		r := runSubscribers(b, f, string(spec))
		b.ReportMetric(r.heapConnected, "heap-MiB-connected")
		b.ReportMetric(r.heapAt[0], "heap-MiB@N")
		b.ReportMetric(r.heapAt[2], "heap-MiB@4N")
		b.ReportMetric(float64(r.peak.HighLen), "peak-queue-events")
		b.ReportMetric(float64(r.peak.HighBytes)/1024, "peak-queue-KiB")
		b.ReportMetric(r.publishRate, "published-events/s")
		b.ReportMetric(r.publishP99, "publish-p99-ms")
		b.ReportMetric(r.stats.FastEventsPerSec, "fast-events/s")
		b.ReportMetric(100*float64(r.stats.FastFinalsMin)/float64(r.finals), "fast-finals-%")
		b.ReportMetric(float64(r.stats.FastReconnects), "fast-reconnects")
		b.ReportMetric(float64(r.stats.SlowReconnects), "slow-reconnects")
	}
}

type subscribersResult struct {
	heapConnected float64
	heapAt        [4]float64 // after N, 2N, 4N, 8N events
	peak          QueueStats
	publishRate   float64
	publishP99    float64 // ms
	finals        int
	stats         clientsStats
}

func runSubscribers(b *testing.B, f *fixture, spec string) subscribersResult {
	var res subscribersResult
	base := readHeap()
	b.Logf("server heap before subscribers: %.1f MiB in use (%.1f MiB live)", base.inUse, base.live)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchClientsEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	connectStart := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("clients: %q, %v", line, err)
	}
	h := readHeap().minus(base)
	res.heapConnected = h.inUse
	b.Logf("%d subscribers connected in %.1f s, nothing published: server heap +%.1f MiB in use (+%.1f MiB live)",
		benchFast+benchSlow, time.Since(connectStart).Seconds(), h.inUse, h.live)

	// Publish at benchRate (paced every 10 ms); measure at N, 2N, 4N, 8N.
	ctx := b.Context()
	var seq uint64
	blocks := 0
	var lat []time.Duration
	began := time.Now()
	n := *benchLagBlocks * (benchDeltas + 2)
	for i, mark := range []int{n, 2 * n, 4 * n, 8 * n} {
		for int(seq) < mark {
			due := int(time.Since(began).Seconds() * float64(*benchRate))
			for int(seq) < min(due, mark) {
				var ev stream.Event
				id := "m-" + strconv.Itoa(blocks)
				switch seq % (benchDeltas + 2) {
				case 0:
					ev = stream.Event{Type: stream.TextMessageStart, MessageID: id, Role: "assistant"}
				case benchDeltas + 1:
					ev = stream.Event{Type: stream.TextMessageEnd, MessageID: id}
					blocks++
				default:
					ev = stream.Event{Type: stream.TextMessageContent, MessageID: id, Delta: benchDeltaText}
				}
				t0 := time.Now()
				if seq, err = f.store.Publish(ctx, runA, ev); err != nil {
					vz, _ := f.store.Embedded().Server().Varz(nil)
					b.Fatalf("%v (NATS connection: %d reconnects; server: %d slow consumers) — above the fan-out ceiling?",
						err, f.store.Conn().Stats().Reconnects, vz.SlowConsumers)
				}
				lat = append(lat, time.Since(t0))
			}
			time.Sleep(10 * time.Millisecond)
		}
		h := readHeap().minus(base)
		res.heapAt[i] = h.inUse
		p := f.h.Peak()
		var queued, maxLen, open int
		for _, q := range f.h.Queues() {
			queued += q.Bytes
			maxLen = max(maxLen, q.Len)
			open++
		}
		b.Logf("after %d events (%.0f s): server heap +%.1f MiB in use (+%.1f MiB live); %d subscribers open, "+
			"queued now %d KiB in all, longest %d; peak %d events / %d KiB, %d merges",
			seq, time.Since(began).Seconds(), h.inUse, h.live, open, queued>>10, maxLen, p.HighLen, p.HighBytes>>10, p.Merges)
	}
	res.publishRate = float64(seq) / time.Since(began).Seconds()
	slices.Sort(lat)
	res.publishP99 = float64(lat[len(lat)*99/100].Microseconds()) / 1000
	b.Logf("publish: %.1f events/s, ack p50 %.1f ms, p99 %.1f ms", res.publishRate,
		float64(lat[len(lat)/2].Microseconds())/1000, res.publishP99)
	res.finals = 2 * blocks
	if _, err := fmt.Fprintf(stdin, "end %d %d\n", seq, res.finals); err != nil {
		b.Fatal(err)
	}
	endStart := time.Now()
	line, err := out.ReadString('\n')
	b.Logf("clients reported %.1f s after the last event", time.Since(endStart).Seconds())
	if err != nil || !strings.HasPrefix(line, "stats ") {
		b.Fatalf("clients: %q, %v", line, err)
	}
	if err := json.Unmarshal([]byte(line[len("stats "):]), &res.stats); err != nil {
		b.Fatal(err)
	}
	res.peak = f.h.Peak()
	st := res.stats
	b.Logf("fast clients: %d events each on average, finals %d..%d of %d, %.1f events/s each (%.0f/s in all), %d reconnects; "+
		"slow clients: %d events read in all, %d reconnects; server: %.0f told to reconnect (overflow)",
		st.FastEvents/benchFast, st.FastFinalsMin, st.FastFinalsMax, res.finals, st.FastEventsPerSec,
		st.FastEventsPerSec*benchFast, st.FastReconnects, st.SlowEvents, st.SlowReconnects, testutil.ToFloat64(f.h.m.overflows))
	for _, e := range st.Errors {
		b.Errorf("client: %s", e)
	}
	if st.FastFinalsMin != res.finals {
		b.Errorf("a fast client got %d of %d finals", st.FastFinalsMin, res.finals)
	}
	return res
}

type heapMiB struct{ inUse, live float64 }

// readHeap returns the heap in use (spans) and live (allocated objects)
// after a GC.
func readHeap() heapMiB {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapMiB{inUse: float64(ms.HeapInuse) / (1 << 20), live: float64(ms.HeapAlloc) / (1 << 20)}
}

func (h heapMiB) minus(o heapMiB) heapMiB { return heapMiB{h.inUse - o.inUse, h.live - o.live} }

// raiseFileLimit raises the soft limit of open files to at least n (up to
// the hard limit); the child process inherits it.
func raiseFileLimit(b *testing.B, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		b.Fatalf("open files: hard limit %d, the benchmark needs %d", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
}

// clientsSpec configures the child process of BenchmarkSubscribers1000.
type clientsSpec struct {
	URL             string
	Fast, Slow      int
	SlowBytesPerSec float64
}

// clientsStats is what it reports.
type clientsStats struct {
	FastEvents                   int
	FastFinalsMin, FastFinalsMax int
	FastEventsPerSec             float64 // mean of the fast clients' rates
	FastReconnects               int
	SlowEvents, SlowReconnects   int
	Errors                       []string
}

func runBenchClients(specJSON string) error {
	var spec clientsSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fastHTTP := &http.Client{Transport: &http.Transport{}}
	// A slow client's small receive buffer leaves the lag in the server's
	// queue rather than in the kernel's socket buffers.
	slowHTTP := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(4 << 10)
			}
			return c, err
		},
	}}
	clients := make([]*benchClient, spec.Fast+spec.Slow)
	var connected, wg sync.WaitGroup
	sem := make(chan struct{}, 50) // connect 50 at a time
	for i := range clients {
		c := &benchClient{url: spec.URL, hc: fastHTTP}
		if i >= spec.Fast {
			c.slow, c.hc, c.bytesPerSec = true, slowHTTP, spec.SlowBytesPerSec
		}
		clients[i] = c
		connected.Add(1)
		sem <- struct{}{}
		wg.Go(func() { c.run(ctx, func() { <-sem; connected.Done() }) })
	}
	connected.Wait()
	fmt.Println("ready")

	var lastSeq uint64
	var finals int
	if _, err := fmt.Fscanf(os.Stdin, "end %d %d\n", &lastSeq, &finals); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, c := range clients[:spec.Fast] {
		for c.lastID.Load() < lastSeq && c.failed.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	st := clientsStats{FastFinalsMin: finals}
	for _, c := range clients {
		if c.err != nil && len(st.Errors) < 5 {
			st.Errors = append(st.Errors, c.err.Error())
		}
		if c.slow {
			st.SlowEvents += c.events
			st.SlowReconnects += c.reconnects
			continue
		}
		if c.lastID.Load() < lastSeq && len(st.Errors) < 5 {
			st.Errors = append(st.Errors, fmt.Sprintf("a fast client stopped at id %d of %d", c.lastID.Load(), lastSeq))
		}
		st.FastEvents += c.events
		st.FastFinalsMin = min(st.FastFinalsMin, c.finals)
		st.FastFinalsMax = max(st.FastFinalsMax, c.finals)
		st.FastReconnects += c.reconnects
		if d := c.lastAt.Sub(c.firstAt).Seconds(); d > 0 {
			st.FastEventsPerSec += float64(c.events) / d / float64(spec.Fast)
		}
	}
	out, err := json.Marshal(st)
	if err != nil {
		return err
	}
	fmt.Printf("stats %s\n", out)
	return nil
}

// benchClient is one subscriber: it reads the stream (SSE lines only, no
// JSON decoding), counts events and finals, and reconnects with
// Last-Event-ID when told to (or when the stream breaks), as EventSource
// does. A slow one reads at bytesPerSec.
type benchClient struct {
	url         string
	hc          *http.Client
	slow        bool
	bytesPerSec float64

	lastID                     atomic.Uint64
	failed                     atomic.Pointer[error]
	events, finals, reconnects int
	firstAt, lastAt            time.Time
	err                        error
}

func (c *benchClient) run(ctx context.Context, connected func()) {
	opened := false
	onOpen := func() {
		if !opened {
			opened = true
			connected()
		}
	}
	for ctx.Err() == nil {
		err := c.stream(ctx, onOpen)
		if ctx.Err() != nil {
			return
		}
		var refused refusedError
		if !opened || errors.As(err, &refused) {
			// Like EventSource, a refused (re)connection is final.
			c.err = err
			c.failed.Store(&err)
			onOpen()
			return
		}
		c.reconnects++
		if err != nil { // the connection broke: wait as EventSource does
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// refusedError is a non-200 answer.
type refusedError struct{ status string }

func (e refusedError) Error() string { return "connection refused with " + e.status }

// stream reads one connection until it ends, calling opened when the
// stream has opened: nil when told to reconnect, else why it ended.
func (c *benchClient) stream(ctx context.Context, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Last-Event-ID", strconv.FormatUint(c.lastID.Load(), 10))
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return refusedError{status: resp.Status + ": " + strings.TrimSpace(string(msg))}
	}
	var body io.Reader = resp.Body
	if c.slow {
		body = &throttledReader{ctx: ctx, r: body, bytesPerSec: c.bytesPerSec}
	}
	br := bufio.NewReaderSize(body, 4<<10)
	var id uint64
	var hasID, hasType bool
	var typ []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				continue // a long data line: its type and id are known already
			}
			return err
		}
		switch {
		case len(line) == 1: // end of a message
			if !hasType {
				continue
			}
			if !hasID { // the reconnect event (the only one without an id)
				return nil
			}
			now := time.Now()
			if c.events == 0 {
				c.firstAt = now
			}
			c.events++
			c.lastAt = now
			if !stream.EventType(typ).IsDelta() {
				c.finals++
			}
			c.lastID.Store(id)
			hasID, hasType = false, false
		case line[0] == ':':
			opened()
		case bytes.HasPrefix(line, []byte("id: ")):
			id, _ = strconv.ParseUint(string(line[4:len(line)-1]), 10, 64)
			hasID = true
		case bytes.HasPrefix(line, []byte("event: ")):
			typ = append(typ[:0], line[7:len(line)-1]...)
			hasType = true
		}
	}
}

// throttledReader reads from r at about bytesPerSec, in reads of at most
// 256 bytes: before each read it sleeps for the bytes of the previous one
// (or until ctx ends).
type throttledReader struct {
	ctx         context.Context
	r           io.Reader
	bytesPerSec float64
	owed        time.Duration
}

func (t *throttledReader) Read(p []byte) (int, error) {
	select {
	case <-t.ctx.Done():
		return 0, t.ctx.Err()
	case <-time.After(t.owed):
	}
	if len(p) > 256 {
		p = p[:256]
	}
	n, err := t.r.Read(p)
	t.owed = time.Duration(float64(n) / t.bytesPerSec * float64(time.Second))
	return n, err
}
