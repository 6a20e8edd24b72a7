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

package stack

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// FaultRules are the faults an OperatorProxy injects between the operator and
// kube-apiserver. The zero value passes everything through. Requests to
// coordination.k8s.io (the leader-election Lease) are never faulted: the
// proxy tests the reconcilers, not the lease.
type FaultRules struct {
	// ConflictRate is the share of writes (POST, PUT, PATCH, DELETE) answered
	// 409 Conflict without being forwarded.
	ConflictRate float64
	// ErrorRate is the share of writes answered 500 without being forwarded.
	ErrorRate float64
	// MaxLatency adds a uniformly random delay in [0, MaxLatency) before
	// every request is forwarded.
	MaxLatency time.Duration
	// WatchCutMin and WatchCutMax: a watch is cut (its connection closed
	// mid-stream) after a random time in [WatchCutMin, WatchCutMax); 0 never.
	WatchCutMin, WatchCutMax time.Duration
	// ExpireRate is the share of watches that resume from a resourceVersion
	// answered with an ERROR event 410 Gone ("too old resource version"), as
	// kube-apiserver does once etcd compacted it: the client must relist.
	ExpireRate float64
}

// ProxyStats counts what an OperatorProxy did.
type ProxyStats struct {
	Requests, Writes, Conflicts, Errors, Watches, WatchesCut, Expired int64
}

// OperatorProxy is a fault-injecting reverse proxy between the operator
// process and kube-apiserver (Stack.RouteOperatorThroughProxy). The operator
// talks plain HTTP to it on loopback; it forwards over TLS under the
// operator's own client certificate, so the API server sees the operator's
// identity and RBAC applies as without it.
type OperatorProxy struct {
	// URL is where the operator's kubeconfig points (http://127.0.0.1:port).
	URL string

	srv   *http.Server
	proxy *httputil.ReverseProxy

	mu    sync.Mutex
	rules FaultRules
	rng   *rand.Rand

	requests, writes, conflicts, errors, watches, cut, expired atomic.Int64
}

// SetRules replaces the faults the proxy injects (FaultRules{} turns them off).
func (p *OperatorProxy) SetRules(r FaultRules) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = r
}

// Stats returns the proxy's counters.
func (p *OperatorProxy) Stats() ProxyStats {
	return ProxyStats{
		Requests: p.requests.Load(), Writes: p.writes.Load(), Conflicts: p.conflicts.Load(),
		Errors: p.errors.Load(), Watches: p.watches.Load(), WatchesCut: p.cut.Load(), Expired: p.expired.Load(),
	}
}

// Close stops the proxy.
func (p *OperatorProxy) Close() error { return p.srv.Close() }

// decision is what the proxy does with one request.
type decision struct {
	latency time.Duration
	status  int // answer this instead of forwarding (0: forward)
	expire  bool
	cutIn   time.Duration // 0: never
}

func (p *OperatorProxy) decide(r *http.Request) decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	rules := p.rules
	var d decision
	if strings.Contains(r.URL.Path, "/apis/coordination.k8s.io/") {
		return d
	}
	if rules.MaxLatency > 0 {
		d.latency = time.Duration(p.rng.Int64N(int64(rules.MaxLatency)))
	}
	q := r.URL.Query()
	if w := q.Get("watch"); w == "true" || w == "1" {
		if rv := q.Get("resourceVersion"); rv != "" && rv != "0" && p.rng.Float64() < rules.ExpireRate {
			d.expire = true
		}
		if rules.WatchCutMax > rules.WatchCutMin {
			d.cutIn = rules.WatchCutMin + time.Duration(p.rng.Int64N(int64(rules.WatchCutMax-rules.WatchCutMin)))
		} else if rules.WatchCutMin > 0 {
			d.cutIn = rules.WatchCutMin
		}
		return d
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		x := p.rng.Float64()
		switch {
		case x < rules.ConflictRate:
			d.status = http.StatusConflict
		case x < rules.ConflictRate+rules.ErrorRate:
			d.status = http.StatusInternalServerError
		}
	}
	return d
}

func isWrite(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch || m == http.MethodDelete
}

// Statuses as kube-apiserver sends them, so clients classify them as usual.
const (
	injectedConflict = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"Operation cannot be fulfilled: the object has been modified (injected by the chaos proxy)",` +
		`"reason":"Conflict","code":409}`
	injectedError = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"Internal error occurred (injected by the chaos proxy)","reason":"InternalError","code":500}`
	injectedExpired = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},` +
		`"status":"Failure","message":"too old resource version (injected by the chaos proxy)",` +
		`"reason":"Expired","code":410}}` + "\n"
)

func (p *OperatorProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if isWrite(r.Method) {
		p.writes.Add(1)
	}
	d := p.decide(r)
	if d.latency > 0 {
		select {
		case <-time.After(d.latency):
		case <-r.Context().Done():
			return
		}
	}
	switch d.status {
	case http.StatusConflict:
		p.conflicts.Add(1)
		writeStatus(w, d.status, injectedConflict)
		return
	case http.StatusInternalServerError:
		p.errors.Add(1)
		writeStatus(w, d.status, injectedError)
		return
	}
	if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
		p.watches.Add(1)
		if d.expire {
			p.expired.Add(1)
			writeStatus(w, http.StatusOK, injectedExpired)
			return
		}
		if d.cutIn > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), d.cutIn)
			defer cancel()
			r = r.WithContext(ctx)
			defer func() {
				if ctx.Err() == context.DeadlineExceeded {
					p.cut.Add(1)
				}
			}()
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// discardLog keeps the reverse proxy's "context canceled" lines (every cut
// watch) out of the test's output.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

func writeStatus(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// RouteOperatorThroughProxy starts an OperatorProxy to kube-apiserver under
// the operator's identity, points the operator's kubeconfig at it and
// restarts the operator (SIGTERM: it releases its Lease). Faults are off
// until SetRules. The proxy is stopped with the stack.
func (s *Stack) RouteOperatorThroughProxy(ctx context.Context) (*OperatorProxy, error) {
	user, _, err := s.serviceAccountUser(OperatorUser, "operator-proxy-user.kubeconfig")
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(user.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(user)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &OperatorProxy{
		URL: "http://" + ln.Addr().String(),
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed)), //nolint:gosec // fault injection
		proxy: &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = target.Host
			},
			Transport:     rt,
			FlushInterval: -1, // watches stream
			ErrorLog:      discardLog(),
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	s.closers = append(s.closers, p)

	kc := clientcmdapi.NewConfig()
	kc.Clusters["chaos-proxy"] = &clientcmdapi.Cluster{Server: p.URL}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{} // the proxy presents the operator's certificate
	kc.Contexts["operator"] = &clientcmdapi.Context{Cluster: "chaos-proxy", AuthInfo: "operator"}
	kc.CurrentContext = "operator"
	path := filepath.Join(s.opts.Dir, "operator-proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	s.Operator.Stop(10 * time.Second)
	s.Operator.Args = setFlag(s.Operator.Args, "kubeconfig", path)
	s.Operator.Env = setEnv(s.Operator.Env, "KUBECONFIG", path)
	_, _ = fmt.Fprintf(s.opts.out(), "==> the operator reaches the API server through the chaos proxy %s\n", p.URL)
	if err := s.StartOperator(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// setFlag sets --name=value in args, replacing an earlier value.
func setFlag(args []string, name, value string) []string {
	out := dropFlag(args, name)
	return append(out, "--"+name+"="+value)
}

// dropFlag removes --name and --name=… from args.
func dropFlag(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// flagValue returns the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}
