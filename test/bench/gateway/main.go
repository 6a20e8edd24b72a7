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

// Command gateway benchmarks agentrun-gateway's model door: the latency it
// adds beside a direct call to the same fake upstream (fixed latency), at
// fixed request rates, non-streaming and streaming (time to first token); its
// CPU and memory per 1,000 requests and per 100 concurrent streams; and that
// no request is served beyond a grant when thousands race the limit. Then
// its tool door (tooldoor.go): the latency the MCP door adds beside a direct
// call to the same tool server, with and without the interceptor chain, and
// the write-ahead cost of a Write call.
//
// The gateway runs as its own process (this binary with --serve), in front
// of an in-memory API server (controller-runtime's fake client; the model
// path never waits on the API server: facts are coalesced), so its CPU and
// RSS are its own. The upstream runs in the driver process.
//
//	make bench-gateway                     (part of make bench; sets KUBEBUILDER_ASSETS)
//	go run ./test/bench/gateway            (the tool door's real API server rows need KUBEBUILDER_ASSETS)
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

const (
	tokenLoad = "token-load"
	tokenRace = "token-race"
)

func main() {
	serve := flag.String("serve", "", "internal: serve a gateway whose models point at this upstream URL")
	raceGrant := flag.Int64("race-grant", 5000, "the grant of the race attempt")
	durable := flag.Bool("durable-admission", false, "the gateway's --durable-admission (default false, as the gateway's)")
	latency := flag.Duration("upstream-latency", 20*time.Millisecond, "the fake upstream's fixed latency")
	duration := flag.Duration("duration", 5*time.Second, "length of each fixed-rate measurement")
	rates := flag.String("rates", "100,1000", "request rates (requests per second)")
	raceN := flag.Int("race-requests", 10000, "requests racing the grant")
	raceClients := flag.Int("race-clients", 32, "concurrent clients racing the grant")
	out := flag.String("out", "docs/benchmarks-gateway", "report path without extension (.md and .json are written)")
	serveTools := flag.String("serve-tools", "", "internal: serve the tool door's gateway, its tool server at this MCP URL")
	kubeconfig := flag.String("tools-kubeconfig", "", "internal: with --serve-tools, the API server (default: in-memory)")
	doors := flag.String("doors", "model,tools,reservation", "the doors to benchmark (model, tools, reservation: agents' sessions)")
	toolRate := flag.Int("tool-rate", 200, "the tool door's call rate (calls per second)")
	toolDuration := flag.Duration("tool-duration", 5*time.Second, "length of each of the tool door's fixed-rate measurements")
	flag.Parse()
	if *serveTools != "" {
		if err := serveToolGateway(*serveTools, *kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, "gateway bench tool server:", err)
			os.Exit(1)
		}
		return
	}
	if *serve != "" {
		if err := serveGateway(*serve, *raceGrant, *durable); err != nil {
			fmt.Fprintln(os.Stderr, "gateway bench server:", err)
			os.Exit(1)
		}
		return
	}
	run := doorSet{model: strings.Contains(*doors, "model"), tools: strings.Contains(*doors, "tools"),
		reservation: strings.Contains(*doors, "reservation"),
		toolRate:    *toolRate, toolDuration: *toolDuration}
	if err := drive(*latency, *duration, *rates, *raceN, *raceClients, *raceGrant, *durable, *out, run); err != nil {
		fmt.Fprintln(os.Stderr, "gateway bench:", err)
		os.Exit(1)
	}
}

// serveGateway runs a gateway in front of two attempts (one with a grant no
// load reaches, one with raceGrant) and prints its URL; it exits when stdin
// closes.
func serveGateway(upstreamURL string, raceGrant int64, durable bool) error {
	mk := func(name, uid string, grant int64) *v1alpha1.RunAttempt {
		ra := gatewaytest.Attempt()
		ra.Name, ra.Spec.PodName, ra.Spec.PodUID = name, name, uid
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: grant, ToolCalls: 10}
		ra.Spec.Policy.Models = []v1alpha1.Model{{Name: gatewaytest.Model, BaseURL: upstreamURL}}
		ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Hour}
		return ra
	}
	c := fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).
		WithObjects(mk("load-1", "uid-load", math.MaxInt32), mk("race-1", "uid-race", raceGrant)).
		WithStatusSubresource(&v1alpha1.RunAttempt{}).Build()
	id := func(name, uid string) gateway.Identity {
		return gateway.Identity{Username: "system:serviceaccount:team:agentrun-runner", Namespace: gatewaytest.Namespace, PodName: name, PodUID: uid}
	}
	g, err := gateway.New(gateway.Options{
		Client:           c,
		DurableAdmission: durable,
		Authenticator:    gateway.StaticTokens{tokenLoad: id("load-1", "uid-load"), tokenRace: id("race-1", "uid-race")},
		Registry:         prometheus.NewRegistry(),
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	return nil
}

// server is the gateway child process.
type server struct {
	cmd   *exec.Cmd
	url   string
	stdin io.WriteCloser
}

func startServer(upstreamURL string, raceGrant int64, durableAdmission bool) (*server, error) {
	return startChild("--serve="+upstreamURL, "--race-grant="+strconv.FormatInt(raceGrant, 10),
		"--durable-admission="+strconv.FormatBool(durableAdmission))
}

// startChild starts this binary with args as a gateway child process.
func startChild(args ...string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the server's URL: %w", err)
	}
	return &server{cmd: cmd, url: strings.TrimSpace(line), stdin: stdin}, nil
}

func (s *server) stop() { _ = s.stdin.Close(); _ = s.cmd.Wait() }

// usage reads the server's CPU time (user+system) and RSS from /proc.
func (s *server) usage() (cpu time.Duration, rss int64) {
	pid := s.cmd.Process.Pid
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return cpu, rss
}

var body = []byte(`{"model":"scripted","messages":[{"role":"system","content":"You are a research agent."},` +
	`{"role":"user","content":"Summarize the replication models of open-source vector databases."}],` +
	`"agentrun_scripted":{"say":"Qdrant uses Raft for metadata; Milvus relies on a shared log and object storage.","tokens":120}}`)

func streamBody() []byte {
	return bytes.Replace(body, []byte(`"model":"scripted",`), []byte(`"model":"scripted","stream":true,`), 1)
}

type result struct {
	Name      string  `json:"name"`
	Rate      int     `json:"rate"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	DirectP50 float64 `json:"directP50ms"`
	DirectP99 float64 `json:"directP99ms"`
	GwP50     float64 `json:"gatewayP50ms"`
	GwP99     float64 `json:"gatewayP99ms"`
	AddedP50  float64 `json:"addedP50ms"`
	AddedP99  float64 `json:"addedP99ms"`
	CPUPer1k  float64 `json:"gatewayCPUms_per_1000"`
	RSSMiB    float64 `json:"gatewayRSSMiB"`
}

// do sends one request and returns its latency: to the whole answer, or
// for a stream to the first content chunk (time to first token).
func do(hc *http.Client, url, token string, stream bool) (time.Duration, error) {
	b := body
	if stream {
		b = streamBody()
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if !stream {
		_, err = io.Copy(io.Discard, resp.Body)
		return time.Since(start), err
	}
	br := bufio.NewReader(resp.Body)
	var ttft time.Duration
	for {
		line, err := br.ReadBytes('\n')
		if ttft == 0 && bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`)) {
			ttft = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	return ttft, nil
}

// openLoop sends rate requests per second for d, each on its own goroutine
// at its scheduled time, and returns the latencies.
func openLoop(hc *http.Client, url, token string, stream bool, rate int, d time.Duration) ([]time.Duration, int) {
	n := int(float64(rate) * d.Seconds())
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		time.Sleep(time.Until(at))
		wg.Go(func() {
			l, err := do(hc, url, token, stream)
			if err != nil {
				errs.Add(1)
				l = -1
			}
			lat[i] = l
		})
	}
	wg.Wait()
	return slices.DeleteFunc(lat, func(l time.Duration) bool { return l < 0 }), int(errs.Load())
}

func pct(l []time.Duration, p float64) float64 {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return float64(s[max(i, 0)]) / float64(time.Millisecond)
}

// doorSet says which doors drive benchmarks.
type doorSet struct {
	model, tools, reservation bool
	toolRate                  int
	toolDuration              time.Duration
}

func drive(latency, d time.Duration, ratesFlag string, raceN, raceClients int, raceGrant int64, durable bool, out string, run doorSet) error {
	rep := report{Machine: machine(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if run.model {
		m, err := driveModel(latency, d, ratesFlag, raceN, raceClients, raceGrant, durable)
		if err != nil {
			return err
		}
		m.Machine, m.Date = rep.Machine, rep.Date
		rep = m
	}
	if run.reservation {
		rows, err := driveReservation()
		if err != nil {
			return err
		}
		rep.Reservation = rows
	}
	if run.tools {
		t, err := driveToolDoor(run.toolRate, run.toolDuration, os.Getenv("KUBEBUILDER_ASSETS"))
		if err != nil {
			return err
		}
		rep.ToolDoor = t
	}
	return rep.write(out)
}

// driveModel benchmarks the model door.
func driveModel(latency, d time.Duration, ratesFlag string, raceN, raceClients int, raceGrant int64, durable bool) (report, error) {
	up := &upstream.Server{Latency: latency}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return report{}, err
	}
	go func() { _ = http.Serve(ln, up) }()
	upURL := "http://" + ln.Addr().String()
	srv, err := startServer(upURL+"/v1", raceGrant, durable)
	if err != nil {
		return report{}, err
	}
	defer srv.stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}}
	// Warm both paths.
	for range 200 {
		_, _ = do(hc, upURL, "", false)
		_, _ = do(hc, srv.url, tokenLoad, false)
	}

	var results []result
	for rs := range strings.SplitSeq(ratesFlag, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(rs))
		if err != nil {
			return report{}, err
		}
		for _, stream := range []bool{false, true} {
			name := "non-streaming (full answer)"
			if stream {
				name = "streaming (time to first token)"
			}
			fmt.Fprintf(os.Stderr, "==> %s at %d requests/s for %s\n", name, rate, d)
			direct, derr := openLoop(hc, upURL, "", stream, rate, d)
			cpu0, _ := srv.usage()
			via, gerr := openLoop(hc, srv.url, tokenLoad, stream, rate, d)
			cpu1, rss := srv.usage()
			r := result{Name: name, Rate: rate, Requests: len(via), Errors: derr + gerr,
				DirectP50: pct(direct, 50), DirectP99: pct(direct, 99), GwP50: pct(via, 50), GwP99: pct(via, 99),
				CPUPer1k: float64(cpu1-cpu0) / float64(time.Millisecond) / float64(max(len(via), 1)) * 1000,
				RSSMiB:   float64(rss) / (1 << 20)}
			r.AddedP50, r.AddedP99 = r.GwP50-r.DirectP50, r.GwP99-r.DirectP99
			results = append(results, r)
		}
	}

	fmt.Fprintf(os.Stderr, "==> 100 concurrent streams held open\n")
	concurrentRSS, concurrentCPU := streams(hc, srv)

	fmt.Fprintf(os.Stderr, "==> %d requests from %d clients racing a grant of %d\n", raceN, raceClients, raceGrant)
	upstreamBefore := up.Requests.Load()
	served, refused, other := race(hc, srv.url, raceN, raceClients)
	dispatched := up.Requests.Load() - upstreamBefore

	rep := report{Machine: machine(), UpstreamLatencyMs: float64(latency) / float64(time.Millisecond), Duration: d.String(),
		Results: results, StreamsRSSMiB: concurrentRSS, StreamsCPUms: concurrentCPU,
		RaceRequests: raceN, RaceClients: raceClients, RaceGrant: raceGrant, RaceServed: served, RaceRefused: refused, RaceOther: other, RaceDispatched: dispatched,
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), DurableAdmission: durable}
	return rep, nil
}

// streams holds 100 streaming requests open at once through the gateway
// (each lasts the upstream latency) and samples the gateway's RSS meanwhile.
func streams(hc *http.Client, srv *server) (float64, float64) {
	var wg sync.WaitGroup
	cpu0, _ := srv.usage()
	var peak int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
				if _, rss := srv.usage(); rss > peak {
					peak = rss
				}
			}
		}
	}()
	for range 100 {
		wg.Go(func() { _, _ = do(hc, srv.url, tokenLoad, true) })
	}
	wg.Wait()
	close(done)
	cpu1, _ := srv.usage()
	return float64(peak) / (1 << 20), float64(cpu1-cpu0) / float64(time.Millisecond)
}

func race(hc *http.Client, url string, n, clients int) (served, refused, other int64) {
	var s, r, o atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tokenRace)
				resp, err := hc.Do(req)
				if err != nil {
					o.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					s.Add(1)
				case http.StatusTooManyRequests:
					r.Add(1)
				default:
					o.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return s.Load(), r.Load(), o.Load()
}

type report struct {
	Date              string   `json:"date"`
	Machine           string   `json:"machine"`
	UpstreamLatencyMs float64  `json:"upstreamLatencyMs"`
	Duration          string   `json:"durationPerMeasurement"`
	Results           []result `json:"results"`
	StreamsRSSMiB     float64  `json:"concurrentStreamsPeakRSSMiB"`
	StreamsCPUms      float64  `json:"concurrentStreamsCPUms"`
	RaceRequests      int      `json:"raceRequests"`
	RaceClients       int      `json:"raceClients"`
	RaceGrant         int64    `json:"raceGrant"`
	RaceServed        int64    `json:"raceServed"`
	RaceRefused       int64    `json:"raceRefused"`
	RaceOther         int64    `json:"raceOther"`
	RaceDispatched    int64    `json:"raceDispatchedUpstream"`
	DurableAdmission  bool     `json:"durableAdmission"`
	// Reservation is the reservation's tightness on agents' sessions
	// (reservation.go).
	Reservation []reservationRow `json:"reservation,omitempty"`
	// ToolDoor is the tool door's part (tooldoor.go).
	ToolDoor *toolReport `json:"toolDoor,omitempty"`
}

func machine() string {
	model := ""
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s", runtime.NumCPU(), model, runtime.Version())
}

func (r report) write(out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(out+".json", append(raw, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark: agentrun-gateway's model door and tool door\n\n")
	fmt.Fprintf(&b, "Written by `make bench-gateway` (`go run ./test/bench/gateway`; part of `make bench`) on %s; %s.\n\n", r.Date, r.Machine)
	if len(r.Results) > 0 {
		r.writeModel(&b)
	}
	if len(r.Reservation) > 0 {
		writeReservation(&b, r.Reservation)
	}
	if r.ToolDoor != nil {
		r.ToolDoor.markdown(&b)
	}
	// Sections measured by Go benchmarks, not by this program, follow
	// keptMarker in the page: they are kept as they are.
	if old, err := os.ReadFile(out + ".md"); err == nil {
		if i := strings.Index(string(old), keptMarker); i >= 0 {
			b.WriteString("\n" + string(old[i:]))
		}
	}
	return os.WriteFile(out+".md", []byte(b.String()), 0o644)
}

// keptMarker starts the part of the page this program does not write.
const keptMarker = "<!-- kept by make bench-gateway: sections measured by Go benchmarks -->"

func (r report) writeModel(b *strings.Builder) {
	fmt.Fprintf(b, "## The model door (OpenAI-compatible, `/v1`)\n\n")
	fmt.Fprintf(b, "The gateway is its own process in front of an in-memory API server (the model path never waits on it: "+
		"counts are written coalesced, or with --durable-admission (%t here) before each dispatch, sharing a write "+
		"with concurrent admissions: against a real API server that adds one status write's latency); the fake upstream "+
		"answers after a fixed %.0f ms and runs in the driver. "+
		"Every request is timed from the driver; *added* is the gateway's percentile minus the direct call's, at the same "+
		"open-loop rate, for %s each.\n\n", r.DurableAdmission, r.UpstreamLatencyMs, r.Duration)
	fmt.Fprintf(b, "| measure | rate (req/s) | requests | direct p50 / p99 (ms) | via gateway p50 / p99 (ms) | **added p50 / p99 (ms)** | gateway CPU per 1,000 req (ms) | gateway RSS (MiB) | errors |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		fmt.Fprintf(b, "| %s | %d | %d | %.2f / %.2f | %.2f / %.2f | **%.2f / %.2f** | %.0f | %.1f | %d |\n",
			x.Name, x.Rate, x.Requests, x.DirectP50, x.DirectP99, x.GwP50, x.GwP99, x.AddedP50, x.AddedP99, x.CPUPer1k, x.RSSMiB, x.Errors)
	}
	fmt.Fprintf(b, "\n100 concurrent streams held open through the gateway: peak RSS %.1f MiB, %.0f ms of gateway CPU in all.\n\n",
		r.StreamsRSSMiB, r.StreamsCPUms)
	verdict := "**none served beyond the grant**"
	if r.RaceServed != r.RaceGrant || r.RaceDispatched != r.RaceGrant {
		verdict = fmt.Sprintf("**%d served against a grant of %d**", r.RaceServed, r.RaceGrant)
	}
	fmt.Fprintf(b, "Grant race: %d requests from %d concurrent clients against a grant of %d model requests: %d served, %d refused "+
		"with 429 `grant_exhausted`, %d other; the upstream received %d — %s.\n\n", r.RaceRequests, r.RaceClients, r.RaceGrant, r.RaceServed, r.RaceRefused, r.RaceOther, r.RaceDispatched, verdict)
	fmt.Fprintf(b, "Anchors: agentgateway reports p99 0.44 ms added at 3,000 QPS; LiteLLM p99 30.6 ms. Target: added p99 under 1 ms at 1,000 requests/s.\n\n")
}
