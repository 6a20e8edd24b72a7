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

// Command gateway benchmarks agentrun-gateway's model doors: for each way
// through (each door passed through, each translation pair; doors.go), the
// latency it adds beside a direct call to the same fake upstream (fixed
// latency), sent in alternating blocks at a fixed rate, non-streaming and
// streaming (time to first token), beside the gateway's own added time
// (agentrun_gateway_added_seconds) read from its process, over several runs
// (report_model.go); its CPU, allocations and memory per 1,000 requests and
// per 100 concurrent streams; and that no request is served beyond a grant
// when thousands race the limit. --gateway-cpus pins the gateway process
// (taskset), --pprof takes its profiles under load. Then
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
	"net/http/pprof"
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
	rates := flag.String("rates", "1000", "request rates (requests per second)")
	wayFlag := flag.String("ways", "all", "the model door's ways through to measure: all, or some of "+strings.Join(wayNames(), ", "))
	runs := flag.Int("runs", 3, "runs of the model door's measurements, each with a gateway process of its own")
	gatewayCPUs := flag.String("gateway-cpus", "", "pin the gateway process to these CPUs (taskset -c; empty: not pinned)")
	pprofDir := flag.String("pprof", "", "write the gateway's CPU, allocation and mutex profiles under load (first run) to this directory")
	mutexProfile := flag.Bool("mutex-profile", false, "internal: the gateway child samples lock contention")
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
		if err := serveGateway(*serve, *raceGrant, *durable, *mutexProfile); err != nil {
			fmt.Fprintln(os.Stderr, "gateway bench server:", err)
			os.Exit(1)
		}
		return
	}
	sel, err := selectWays(*wayFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway bench:", err)
		os.Exit(2)
	}
	run := doorSet{model: strings.Contains(*doors, "model"), tools: strings.Contains(*doors, "tools"),
		reservation: strings.Contains(*doors, "reservation"),
		toolRate:    *toolRate, toolDuration: *toolDuration,
		ways: sel, runs: max(*runs, 1), gatewayCPUs: *gatewayCPUs, pprofDir: *pprofDir}
	if err := drive(*latency, *duration, *rates, *raceN, *raceClients, *raceGrant, *durable, *out, run); err != nil {
		fmt.Fprintln(os.Stderr, "gateway bench:", err)
		os.Exit(1)
	}
}

// serveGateway runs a gateway in front of two attempts (one with a grant no
// load reaches, one with raceGrant) and prints its URL; it exits when stdin
// closes.
func serveGateway(upstreamURL string, raceGrant int64, durable, mutexProfile bool) error {
	if mutexProfile {
		runtime.SetMutexProfileFraction(5)
	}
	mk := func(name, uid string, grant int64) *v1alpha1.RunAttempt {
		ra := gatewaytest.Attempt()
		ra.Name, ra.Spec.PodName, ra.Spec.PodUID = name, name, uid
		ra.Spec.Grant = v1alpha1.Grant{ModelRequests: grant, ToolCalls: 10}
		ra.Spec.Policy.Models = benchModels(upstreamURL)
		ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Hour}
		return ra
	}
	c := fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).
		WithObjects(mk("load-1", "uid-load", math.MaxInt32), mk("race-1", "uid-race", raceGrant)).
		WithStatusSubresource(&v1alpha1.RunAttempt{}).Build()
	id := func(name, uid string) gateway.Identity {
		return gateway.Identity{Username: "system:serviceaccount:team:agentrun-runner", Namespace: gatewaytest.Namespace, PodName: name, PodUID: uid}
	}
	reg := prometheus.NewRegistry()
	g, err := gateway.New(gateway.Options{
		Client:           c,
		DurableAdmission: durable,
		Authenticator:    gateway.StaticTokens{tokenLoad: id("load-1", "uid-load"), tokenRace: id("race-1", "uid-race")},
		Registry:         reg,
		// The load attempt has more than the default 32 requests under way
		// whenever the machine stalls for 32 ms: refused, they would leave
		// the latency figures (and hide the tail).
		MaxAttemptConcurrency: 4096,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// The benchmark's own routes beside the gateway's: its in-process
	// figures and Go's profiles.
	mux := http.NewServeMux()
	mux.Handle("/", g.Handler())
	mux.Handle("/bench/inprocess", serveInProcess(reg))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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

func startServer(upstreamURL string, raceGrant int64, durableAdmission bool, cpus string, mutexProfile bool) (*server, error) {
	args := []string{"--serve=" + upstreamURL, "--race-grant=" + strconv.FormatInt(raceGrant, 10),
		"--durable-admission=" + strconv.FormatBool(durableAdmission), "--mutex-profile=" + strconv.FormatBool(mutexProfile)}
	return startPinned(cpus, args...)
}

// startChild starts this binary with args as a gateway child process.
func startChild(args ...string) (*server, error) { return startPinned("", args...) }

// startPinned starts this binary with args as a gateway child process, on
// cpus (taskset -c) unless empty.
func startPinned(cpus string, args ...string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	if cpus != "" {
		cmd = exec.Command("taskset", append([]string{"-c", cpus, self}, args...)...)
	}
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

// result is one row of one run.
type result struct {
	Run       int     `json:"run"`
	Way       string  `json:"way"`
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
	// In* are the gateway's own added time (agentrun_gateway_added_seconds
	// of the way's door) over the measurement: p50, p99 (interpolated in
	// its buckets), mean (exact) in ms, the share at most 1 ms, and the
	// observations.
	InP50      float64 `json:"inProcessP50ms"`
	InP99      float64 `json:"inProcessP99ms"`
	InMean     float64 `json:"inProcessMeanms"`
	InUnder1ms float64 `json:"inProcessUnder1ms"`
	InCount    uint64  `json:"inProcessCount"`
	// AllocsPerReq and KBPerReq are the gateway process's heap allocations
	// per request over the measurement (runtime.MemStats).
	AllocsPerReq float64 `json:"gatewayAllocsPerRequest"`
	KBPerReq     float64 `json:"gatewayKBPerRequest"`
	// GCPer1k is the gateway's garbage collections per 1,000 requests,
	// GCPauseMs their stop-the-world time over the measurement.
	GCPer1k   float64 `json:"gatewayGCsPer1000"`
	GCPauseMs float64 `json:"gatewayGCPauseMs"`
}

// The measures of a row.
const (
	measureFull       = "non-streaming (full answer)"
	measureFirstToken = "streaming (time to first token)"
)

// runInfo is one run: when, and the machine's load average (1 minute)
// before and after it.
type runInfo struct {
	Run       int    `json:"run"`
	Date      string `json:"date"`
	Load      string `json:"loadAverage"`
	LoadAfter string `json:"loadAverageAfter"`
}

// do sends one request the way w goes and returns its latency: to the whole
// answer, or for a stream to the first text (time to first token).
func do(hc *http.Client, url, token string, w way, stream bool) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, url+w.path, bytes.NewReader(w.request(stream)))
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
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
	}
	if !stream {
		_, err = io.Copy(io.Discard, resp.Body)
		return time.Since(start), err
	}
	br := bufio.NewReader(resp.Body)
	var ttft time.Duration
	for {
		line, err := br.ReadBytes('\n')
		if ttft == 0 && w.firstToken(line) {
			ttft = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	return ttft, nil
}

// pairedLoop sends rate requests per second for 2d, alternating between
// two targets in blocks of block (the direct call, then the gateway, then
// the direct call…), each request on its own goroutine at its scheduled
// time, and returns each target's latencies and errors: d at rate for
// each, and whatever load the machine carries meanwhile falls on both
// alike.
func pairedLoop(hc *http.Client, targets [2]target, w way, stream bool, rate int, d, block time.Duration,
) ([2][]time.Duration, [2]int) {
	n := 2 * int(float64(rate)*d.Seconds())
	lat := make([]time.Duration, n)
	side := make([]int, n)
	var errs [2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		off := time.Duration(float64(i) / float64(rate) * float64(time.Second))
		t := int(off/block) % 2
		side[i] = t
		time.Sleep(time.Until(start.Add(off)))
		wg.Go(func() {
			l, err := do(hc, targets[t].url, targets[t].token, w, stream)
			if err != nil {
				if errs[t].Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "    first error (%s): %v\n", []string{"direct", "via the gateway"}[t], err)
				}
				l = -1
			}
			lat[i] = l
		})
	}
	wg.Wait()
	var out [2][]time.Duration
	for i, l := range lat {
		if l >= 0 {
			out[side[i]] = append(out[side[i]], l)
		}
	}
	return out, [2]int{int(errs[0].Load()), int(errs[1].Load())}
}

// target is where a request goes: a base URL and its token.
type target struct{ url, token string }

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
	// ways are the model door's ways through to measure, runs times each
	// (each run with a gateway process of its own, on gatewayCPUs); the
	// first run's profiles go to pprofDir.
	ways        []way
	runs        int
	gatewayCPUs string
	pprofDir    string
}

func drive(latency, d time.Duration, ratesFlag string, raceN, raceClients int, raceGrant int64, durable bool, out string, run doorSet) error {
	rep := report{Machine: machine(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if run.model {
		m, err := driveModel(latency, d, ratesFlag, raceN, raceClients, raceGrant, durable, run)
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

// driveModel benchmarks the model door: every way through, run.runs
// times, then the concurrent streams and the grant race.
func driveModel(latency, d time.Duration, ratesFlag string, raceN, raceClients int, raceGrant int64, durable bool,
	run doorSet) (report, error) {
	up := &upstream.Server{Latency: latency}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return report{}, err
	}
	go func() { _ = http.Serve(ln, up) }()
	upURL := "http://" + ln.Addr().String()
	var rates []int
	for rs := range strings.SplitSeq(ratesFlag, ",") {
		rate, err := strconv.Atoi(strings.TrimSpace(rs))
		if err != nil {
			return report{}, fmt.Errorf("--rates: %w", err)
		}
		rates = append(rates, rate)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}}
	rep := report{Machine: machine(), UpstreamLatencyMs: float64(latency) / float64(time.Millisecond), Duration: d.String(),
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), DurableAdmission: durable, Runs: run.runs,
		DriverCPUs: cpusAllowed("self")}
	var srv *server
	for n := 1; n <= run.runs; n++ {
		if srv != nil {
			srv.stop()
		}
		if srv, err = startServer(upURL+"/v1", raceGrant, durable, run.gatewayCPUs, run.pprofDir != ""); err != nil {
			return report{}, err
		}
		rep.GatewayCPUs = cpusAllowed(strconv.Itoa(srv.cmd.Process.Pid))
		info := runInfo{Run: n, Date: time.Now().UTC().Format("15:04:05 UTC"), Load: loadAverage()}
		fmt.Fprintf(os.Stderr, "==> run %d of %d (load average %s)\n", n, run.runs, info.Load)
		rows, err := measureRun(hc, upURL, srv, run, rates, d, n)
		if err != nil {
			srv.stop()
			return report{}, err
		}
		info.LoadAfter = loadAverage()
		rep.RunInfo = append(rep.RunInfo, info)
		rep.Results = append(rep.Results, rows...)
	}
	defer srv.stop()

	fmt.Fprintf(os.Stderr, "==> 100 concurrent streams held open\n")
	rep.StreamsRSSMiB, rep.StreamsCPUms = streams(hc, srv)

	fmt.Fprintf(os.Stderr, "==> %d requests from %d clients racing a grant of %d\n", raceN, raceClients, raceGrant)
	upstreamBefore := up.Requests.Load()
	served, refused, other := race(hc, srv.url, raceN, raceClients)
	rep.RaceRequests, rep.RaceClients, rep.RaceGrant = raceN, raceClients, raceGrant
	rep.RaceServed, rep.RaceRefused, rep.RaceOther = served, refused, other
	rep.RaceDispatched = up.Requests.Load() - upstreamBefore
	return rep, nil
}

// measureRun measures every way at every rate, streamed and not, against
// the gateway srv: the client-side latency beside a direct call to the
// upstream in the same API, and the gateway's own added time.
func measureRun(hc *http.Client, upURL string, srv *server, run doorSet, rates []int, d time.Duration, n int) ([]result, error) {
	// Warm both paths, every way.
	for range 100 {
		for _, w := range run.ways {
			_, _ = do(hc, upURL, "", w, false)
			_, _ = do(hc, srv.url, tokenLoad, w, false)
		}
	}
	var results []result
	for _, rate := range rates {
		for _, w := range run.ways {
			for _, stream := range []bool{false, true} {
				r, err := measureWay(hc, upURL, srv, w, stream, rate, d, n, run.pprofDir)
				if err != nil {
					return nil, err
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// pairBlock is how long the paired loop sends to one target before the
// other.
const pairBlock = 250 * time.Millisecond

// measureWay is one row of one run.
func measureWay(hc *http.Client, upURL string, srv *server, w way, stream bool, rate int, d time.Duration, n int,
	pprofDir string) (result, error) {
	name := measureFull
	if stream {
		name = measureFirstToken
	}
	fmt.Fprintf(os.Stderr, "==> %s, %s at %d requests/s for %s\n", w.Name, name, rate, d)
	cpu0, _ := srv.usage()
	ip0, err := srv.inProcess(hc)
	if err != nil {
		return result{}, err
	}
	var prof sync.WaitGroup
	if pprofDir != "" && n == 1 {
		prof.Go(func() { profile(hc, srv, pprofDir, w, stream, d) })
	}
	lat, errs := pairedLoop(hc, [2]target{{upURL, ""}, {srv.url, tokenLoad}}, w, stream, rate, d, pairBlock)
	direct, via, derr, gerr := lat[0], lat[1], errs[0], errs[1]
	prof.Wait()
	cpu1, rss := srv.usage()
	ip1, err := srv.inProcess(hc)
	if err != nil {
		return result{}, err
	}
	reqs := float64(max(len(via), 1))
	h := ip1.Doors[w.door].since(ip0.Doors[w.door])
	r := result{Run: n, Way: w.Name, Name: name, Rate: rate, Requests: len(via), Errors: derr + gerr,
		DirectP50: pct(direct, 50), DirectP99: pct(direct, 99), GwP50: pct(via, 50), GwP99: pct(via, 99),
		CPUPer1k: float64(cpu1-cpu0) / float64(time.Millisecond) / reqs * 1000,
		RSSMiB:   float64(rss) / (1 << 20),
		InP50:    h.quantile(0.50), InP99: h.quantile(0.99), InMean: h.Sum / float64(max(h.Count, 1)) * 1000,
		InUnder1ms: h.under(1e-3), InCount: h.Count,
		AllocsPerReq: float64(ip1.Mallocs-ip0.Mallocs) / reqs, KBPerReq: float64(ip1.TotalAlloc-ip0.TotalAlloc) / reqs / 1024,
		GCPer1k: float64(ip1.NumGC-ip0.NumGC) / reqs * 1000, GCPauseMs: float64(ip1.PauseTotalNs-ip0.PauseTotalNs) / 1e6}
	r.AddedP50, r.AddedP99 = r.GwP50-r.DirectP50, r.GwP99-r.DirectP99
	return r, nil
}

// profile takes the gateway's CPU profile over most of a measurement, then
// its allocation and mutex profiles (cumulative since it started: compare
// with -base), into dir.
func profile(hc *http.Client, srv *server, dir string, w way, stream bool, d time.Duration) {
	slug := strings.NewReplacer(" → ", "-to-", " ", "-").Replace(strings.ToLower(w.Name))
	if stream {
		slug += "-stream"
	}
	get := func(path, file string) {
		resp, err := hc.Get(srv.url + path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "profile:", err)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, file), raw, 0o644)
	}
	get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(int(d.Seconds())-1, 1)), slug+".cpu.pprof")
	get("/debug/pprof/allocs", slug+".allocs.pprof")
	get("/debug/pprof/mutex", slug+".mutex.pprof")
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
		wg.Go(func() { _, _ = do(hc, srv.url, tokenLoad, chatWay, true) })
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
				req, _ := http.NewRequest(http.MethodPost, url+chatWay.path, bytes.NewReader(chatWay.body))
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
	Date              string    `json:"date"`
	Machine           string    `json:"machine"`
	UpstreamLatencyMs float64   `json:"upstreamLatencyMs"`
	Duration          string    `json:"durationPerMeasurement"`
	Results           []result  `json:"results"`
	Runs              int       `json:"runs"`
	RunInfo           []runInfo `json:"runInfo"`
	// DriverCPUs and GatewayCPUs are the CPUs each process may run on.
	DriverCPUs       string  `json:"driverCPUs"`
	GatewayCPUs      string  `json:"gatewayCPUs"`
	StreamsRSSMiB    float64 `json:"concurrentStreamsPeakRSSMiB"`
	StreamsCPUms     float64 `json:"concurrentStreamsCPUms"`
	RaceRequests     int     `json:"raceRequests"`
	RaceClients      int     `json:"raceClients"`
	RaceGrant        int64   `json:"raceGrant"`
	RaceServed       int64   `json:"raceServed"`
	RaceRefused      int64   `json:"raceRefused"`
	RaceOther        int64   `json:"raceOther"`
	RaceDispatched   int64   `json:"raceDispatchedUpstream"`
	DurableAdmission bool    `json:"durableAdmission"`
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
