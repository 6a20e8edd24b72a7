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
	"fmt"
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

// APIFaults is a fault-injecting reverse proxy between the gateway process
// and kube-apiserver (Options.GatewayAPIFaults). The gateway talks plain HTTP
// to it on loopback; it forwards every request over TLS under the gateway's
// own client certificate, so the API server sees the gateway's identity, and
// answers TokenReviews with 503 while told to (FailTokenReviews,
// FailNextTokenReviews). Everything else passes through untouched.
type APIFaults struct {
	// URL is where the gateway's kubeconfig points (http://127.0.0.1:port).
	URL string

	srv      *http.Server
	failAll  atomic.Bool
	mu       sync.Mutex
	failNext int
	seen     atomic.Int64
	failed   atomic.Int64
}

// FailTokenReviews makes every TokenReview fail with 503 while on.
func (f *APIFaults) FailTokenReviews(on bool) { f.failAll.Store(on) }

// FailNextTokenReviews makes the next n TokenReviews fail with 503; later
// ones pass again (0 cancels what is left).
func (f *APIFaults) FailNextTokenReviews(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = max(n, 0)
}

// TokenReviews returns how many TokenReviews the gateway sent through the
// proxy, and how many of them were failed.
func (f *APIFaults) TokenReviews() (seen, failed int64) { return f.seen.Load(), f.failed.Load() }

// Close stops the proxy.
func (f *APIFaults) Close() error { return f.srv.Close() }

// fail says whether this TokenReview is to fail.
func (f *APIFaults) fail() bool {
	if f.failAll.Load() {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return true
	}
	return false
}

func isTokenReview(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews")
}

// tokenReviewsDown is the 503 a failed TokenReview gets: a Status, as the
// API server itself would send, so clients report its message.
const tokenReviewsDown = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
	`"message":"TokenReviews are unavailable (injected by the dev stack's API fault proxy)",` +
	`"reason":"ServiceUnavailable","code":503}`

func (f *APIFaults) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if isTokenReview(r) {
		f.seen.Add(1)
		if f.fail() {
			f.failed.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(tokenReviewsDown))
			return
		}
	}
	next.ServeHTTP(w, r)
}

// startAPIFaults starts the proxy to the API server as user (its client
// certificate) and writes Dir/name, a kubeconfig that points at the proxy.
func (s *Stack) startAPIFaults(user *rest.Config, name string) (string, error) {
	target, err := url.Parse(user.Host)
	if err != nil {
		return "", err
	}
	rt, err := rest.TransportFor(user)
	if err != nil {
		return "", err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport:     rt,
		FlushInterval: -1, // watches stream
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	f := &APIFaults{URL: "http://" + ln.Addr().String()}
	f.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, proxy) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = f.srv.Serve(ln) }()
	s.APIFaults = f
	s.closers = append(s.closers, f)

	kc := clientcmdapi.NewConfig()
	kc.Clusters["agentrun-dev-api-faults"] = &clientcmdapi.Cluster{Server: f.URL}
	kc.AuthInfos["gateway"] = &clientcmdapi.AuthInfo{} // the proxy presents the gateway's certificate
	kc.Contexts["gateway"] = &clientcmdapi.Context{Cluster: "agentrun-dev-api-faults", AuthInfo: "gateway"}
	kc.CurrentContext = "gateway"
	path := filepath.Join(s.opts.Dir, name)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	return path, nil
}
