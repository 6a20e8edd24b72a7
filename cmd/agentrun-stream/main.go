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

// Command agentrun-stream serves the run stream: the events of every
// ResearchRun — the gateways' model stream blocks and tool calls, and the
// status changes its own watcher publishes — stored in NATS JetStream and
// served over SSE with Last-Event-ID resume, a snapshot first, a bounded
// queue per client, and a small web page to watch runs.
//
// By default NATS runs in this process with a file store in --store-dir,
// accepting the gateways on --nats-listen (mutual TLS with
// --nats-tls-cert-dir); --nats-url uses an external NATS cluster instead.
// The stream is a side path: no run waits for it.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream/sse"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
}

type flags struct {
	listen, certDir                     string
	metricsAddr, probeAddr              string
	storeDir, natsURL, natsListen       string
	natsTLSDir                          string
	syncAlways, leaderElect             bool
	maxAge                              time.Duration
	maxBytes, maxEventsPerRun           int64
	leaderElectionNamespace             string
	queueEvents, queueBytes, sendBuffer int
	tokenAudience                       string
}

func parseFlags() (flags, zap.Options) {
	var f flags
	flag.StringVar(&f.listen, "listen", ":8443", "Address of the SSE endpoint and the web page (TLS with --tls-cert-dir).")
	flag.StringVar(&f.certDir, "tls-cert-dir", "", "Directory of the serving certificate (tls.crt, tls.key). "+
		"Empty serves plain HTTP: only for a loopback listener in local runs.")
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint (0 disables it).")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the health probes.")
	flag.StringVar(&f.storeDir, "store-dir", "/var/lib/agentrun-stream",
		"The embedded NATS server's JetStream store directory.")
	flag.StringVar(&f.natsURL, "nats-url", "",
		"An external NATS server or cluster (nats://…) instead of the embedded one.")
	flag.StringVar(&f.natsListen, "nats-listen", "",
		"Where the embedded NATS server accepts gateways (host:port); empty: none.")
	flag.StringVar(&f.natsTLSDir, "nats-tls-cert-dir", "",
		"Directory with tls.crt, tls.key and ca.crt: the NATS listener is TLS and requires client certificates "+
			"signed by ca.crt (the gateways'). Empty: plain, for loopback only.")
	flag.BoolVar(&f.syncAlways, "sync-always", false,
		"fsync every event before it is acknowledged (survives power loss; ~30x slower).")
	flag.DurationVar(&f.maxAge, "max-age", store.DefaultMaxAge, "Events older than this are removed.")
	flag.Int64Var(&f.maxBytes, "max-bytes", store.DefaultMaxBytes, "Bound of the whole store; the oldest events go first.")
	flag.Int64Var(&f.maxEventsPerRun, "max-events-per-run", store.DefaultMaxEventsPerRun, "Bound of one run's events.")
	flag.BoolVar(&f.leaderElect, "leader-elect", false,
		"Elect a leader for the status watcher (run more than one replica only with --nats-url).")
	flag.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease.")
	flag.IntVar(&f.queueEvents, "subscriber-queue-events", 256, "Bound of each SSE client's queue, in events: past it, "+
		"deltas of one block are merged, and a client that still lags is told to reconnect.")
	flag.IntVar(&f.queueBytes, "subscriber-queue-bytes", 1<<20, "Bound of each SSE client's queue, in bytes.")
	flag.StringVar(&f.tokenAudience, "token-audience", sse.DefaultAudience, "Audience a reader's bearer token must be "+
		"issued for (TokenReview spec.audiences): kubectl create token NAME --audience "+sse.DefaultAudience+". "+
		"A token of the API server's own audience, or the gateway's, is refused.")
	flag.IntVar(&f.sendBuffer, "subscriber-send-buffer", 0,
		"SO_SNDBUF of each client connection, in bytes: bounds the kernel memory a slow client holds "+
			"(0: the kernel's autotuning, up to net.ipv4.tcp_wmem's maximum).")
	zopts := zap.Options{}
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	return f, zopts
}

func main() {
	f, zopts := parseFlags()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	if err := run(f); err != nil {
		setupLog.Error(err, "agentrun-stream stopped")
		os.Exit(1)
	}
}

func run(f flags) error {
	ctx := ctrl.SetupSignalHandler()
	cfg := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "agentrun-stream.agentrun.dev",
		LeaderElectionNamespace: f.leaderElectionNamespace,
	})
	if err != nil {
		return fmt.Errorf("create the manager: %w", err)
	}
	scfg, err := storeConfig(f)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := store.Open(octx, scfg)
	cancel()
	if err != nil {
		return err
	}
	defer st.Close()
	if emb := st.Embedded(); emb != nil && f.natsListen != "" {
		setupLog.Info("NATS accepts gateways", "url", emb.ClientURL(), "tls", scfg.ListenTLS != nil)
	}
	srv, err := newServer(ctx, mgr, cfg, st, f)
	if err != nil {
		return err
	}
	tlsCfg, err := servingTLS(mgr, f.certDir)
	if err != nil {
		return err
	}
	if err := mgr.Add(serve(f.listen, f.sendBuffer, srv, tlsCfg)); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(*http.Request) error {
		if st.Conn().Status() != nats.CONNECTED {
			return errors.New("the event store is not connected")
		}
		return nil
	}); err != nil {
		return err
	}
	setupLog.Info("Starting agentrun-stream", "listen", f.listen, "store", storeName(f))
	return mgr.Start(ctx)
}

func storeName(f flags) string {
	if f.natsURL != "" {
		return f.natsURL
	}
	return f.storeDir
}

func storeConfig(f flags) (store.Config, error) {
	c := store.Config{
		URL: f.natsURL, SyncAlways: f.syncAlways,
		MaxAge: f.maxAge, MaxBytes: f.maxBytes, MaxEventsPerRun: f.maxEventsPerRun,
		Metrics: store.NewMetrics(ctrlmetrics.Registry),
	}
	if f.natsURL != "" {
		return c, nil
	}
	c.Dir, c.Listen = f.storeDir, f.natsListen
	if f.natsTLSDir != "" && f.natsListen != "" {
		t, err := mutualTLS(f.natsTLSDir)
		if err != nil {
			return c, err
		}
		c.ListenTLS = t
	}
	return c, nil
}

// mutualTLS is the NATS listener's TLS: its certificate, and client
// certificates required and verified against ca.crt.
func mutualTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("NATS TLS: no certificate in %s", filepath.Join(dir, "ca.crt"))
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}, nil
}

func servingTLS(mgr ctrl.Manager, dir string) (*tls.Config, error) {
	if dir == "" {
		return nil, nil
	}
	cw, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("load the serving certificate: %w", err)
	}
	if err := mgr.Add(cw); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate}, nil
}

// serve runs the HTTP server on every replica (not only the leader).
func serve(listen string, sendBuffer int, h http.Handler, tlsCfg *tls.Config) manager.Runnable {
	return nonLeader{manager.RunnableFunc(func(ctx context.Context) error {
		lc := net.ListenConfig{}
		if sendBuffer > 0 {
			// Accepted connections inherit the listener's SO_SNDBUF.
			lc.Control = func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sendBuffer)
				}); err != nil {
					return err
				}
				return serr
			}
		}
		ln, err := lc.Listen(ctx, "tcp", listen)
		if err != nil {
			return err
		}
		if tlsCfg != nil {
			ln = tls.NewListener(ln, tlsCfg)
		}
		// Open streams end with the process context.
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return ctx }}
		setupLog.Info("Serving run streams", "address", ln.Addr().String(), "tls", tlsCfg != nil)
		errc := make(chan error, 1)
		go func() { errc <- hs.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		return nil
	})}
}

type nonLeader struct{ manager.RunnableFunc }

func (nonLeader) NeedLeaderElection() bool { return false }
