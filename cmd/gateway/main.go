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

// Command gateway is agentrun-gateway: the agent's only door. Attempt pods
// reach models (OpenAI-compatible, /v1/...) and report the facts the gateway
// cannot see (/agentrun/v1/self/...) through it, with a projected
// service-account token of audience agentrun-gateway. The gateway checks the
// token (TokenReview), maps the pod to its RunAttempt, enforces the grant,
// and is — with the operator — the only writer of RunAttempt status.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "k8s.io/client-go/plugin/pkg/client/auth"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/tracing"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
}

func main() {
	var (
		listen, certDir, certName, keyName string
		metricsAddr, probeAddr             string
		metricsCertDir                     string
		metricsCertName, metricsKeyName    string
		secureMetrics                      bool
		flushInterval, tokenTTL            time.Duration
		upstreamTimeout                    time.Duration
		minCallTime                        time.Duration
		nodeName                           string
		durableAdmission                   bool
		qps                                float64
		burst                              int
		reviewQPS                          float64
		reviewBurst, maxReviews            int
		rejectTTL                          time.Duration
		serverLimits                       gateway.ServerLimits
		maxModelResponse, maxToolResult    int64
		maxAttemptConcurrency              int
		auditLog, namespace                string
		rateLimit                          float64
		rateBurst                          int
		streamURL, streamTLSDir            string
		leaseName                          string
		leaseDuration, leaseRenew          time.Duration
		pprofAddr, otlpEndpoint            string
	)
	flag.StringVar(&pprofAddr, "pprof-bind-address", "",
		"Address of the pprof endpoint (/debug/pprof/, e.g. 127.0.0.1:8082). Empty: off.")
	flag.StringVar(&otlpEndpoint, "otlp-endpoint", "",
		"OTLP endpoint the model-request and tool-call spans are exported to; overrides $"+tracing.EnvEndpoint+
			". Empty and no variable set: no tracing (and no trace context is sent to providers).")
	flag.IntVar(&gateway.MaxSessionSeries, "max-session-series", gateway.MaxSessionSeries,
		"Most (namespace, session) pairs the usage-by-session metrics have series for; later sessions are counted "+
			"under session "+gateway.OtherSessions+".")
	flag.StringVar(&listen, "listen", ":8443", "Address the gateway serves agents on (TLS).")
	flag.StringVar(&certDir, "tls-cert-dir", "", "Directory holding the serving certificate (cert-manager's Secret). "+
		"Empty serves plain HTTP: only for a loopback listener in local runs.")
	flag.StringVar(&certName, "tls-cert-name", "tls.crt", "Serving certificate file name in --tls-cert-dir.")
	flag.StringVar(&keyName, "tls-key-name", "tls.key", "Serving key file name in --tls-cert-dir.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8444", "Address of the metrics endpoint (0 disables it).")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"Serve the metrics over HTTPS, to callers the API server authenticates (TokenReview) and authorizes "+
			"(SubjectAccessReview: get on /metrics) as the operator's are. False: plain HTTP, no authentication "+
			"(only for a loopback listener in local runs).")
	flag.StringVar(&metricsCertDir, "metrics-cert-path", "",
		"Directory holding the metrics server's certificate (cert-manager's Secret). Empty: a self-signed certificate "+
			"generated at start, which no scraper can verify.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt",
		"Metrics certificate file name in --metrics-cert-path.")
	flag.StringVar(&metricsKeyName, "metrics-cert-key", "tls.key", "Metrics key file name in --metrics-cert-path.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health probes.")
	flag.DurationVar(&flushInterval, "flush-interval", gateway.DefaultFlushInterval,
		"How often coalesced facts are written to each RunAttempt: the most model-usage a crash can lose.")
	flag.DurationVar(&tokenTTL, "token-cache-ttl", 10*time.Second, "How long a TokenReview answer is reused.")
	flag.DurationVar(&serverLimits.ReadHeaderTimeout, "read-header-timeout", gateway.DefaultReadHeaderTimeout,
		"How long a connection may take to send a request's headers (and, first, the TLS handshake).")
	flag.DurationVar(&serverLimits.ReadTimeout, "read-timeout", gateway.DefaultReadTimeout,
		"How long a connection may take to send a whole request, body included; answers (streams, approval waits) "+
			"are not bounded by it.")
	flag.DurationVar(&serverLimits.IdleTimeout, "idle-timeout", gateway.DefaultIdleTimeout,
		"How long a kept-alive connection may wait for its next request before the gateway closes it.")
	flag.Int64Var(&maxModelResponse, "max-model-response-bytes", gateway.DefaultMaxModelResponseBytes,
		"Largest non-streaming model answer the gateway holds (and longest line of a streamed one); a larger one is "+
			"answered 502 upstream_response_too_large, counted and charged its token reservation.")
	flag.Int64Var(&maxToolResult, "max-tool-result-bytes", gateway.DefaultMaxToolResultBytes,
		"Largest answer of a tool server to one call; a larger one is a tool error tool_result_too_large (a side "+
			"effect's outcome is then recorded Unknown: it was dispatched).")
	flag.IntVar(&maxAttemptConcurrency, "max-attempt-concurrency", gateway.DefaultMaxAttemptConcurrency,
		"Most model requests and tool calls one attempt may have under way at once; more are refused 429 "+
			"too_many_concurrent_requests with Retry-After.")
	flag.DurationVar(&upstreamTimeout, "upstream-timeout", gateway.DefaultUpstreamTimeout,
		"Bound of one upstream model request (the run's deadline bounds it further).")
	flag.DurationVar(&minCallTime, "min-call-time", gateway.DefaultMinCallTime,
		"The least time before the run's deadline a model request or door tool call needs to be started.")
	flag.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"),
		"The node this instance serves (default $NODE_NAME): tokens of pods on other nodes are refused, "+
			"so an attempt's counts are never split. Empty: no check.")
	flag.BoolVar(&durableAdmission, "durable-admission", false,
		"Write every admitted model request and tool call to its RunAttempt before dispatching it (concurrent "+
			"admissions share a write): no gateway crash can then let a run cross its grant, at one API write's "+
			"latency per admission. False: counts are coalesced, and a crash can lose (and re-admit) one flush interval's.")
	flag.Float64Var(&qps, "kube-api-qps", 100, "Client-side QPS limit for requests to the API server.")
	flag.IntVar(&burst, "kube-api-burst", 200, "Client-side burst for requests to the API server.")
	flag.Float64Var(&reviewQPS, "token-review-qps", 50,
		"Client-side QPS limit of TokenReviews, a client and limiter of their own: tokens any pod presents cannot "+
			"slow the attempts' status writes.")
	flag.IntVar(&reviewBurst, "token-review-burst", 100, "Client-side burst of TokenReviews.")
	flag.IntVar(&maxReviews, "max-token-reviews", gateway.DefaultMaxTokenReviews,
		"Most TokenReviews under way at once (per reviewer: the door's and the auth interceptor's); more wait for a slot.")
	flag.DurationVar(&rejectTTL, "token-reject-ttl", gateway.DefaultRejectTTL,
		"How long a rejected token is answered 401 from memory (by its SHA-256, at most 8192 kept) before it is "+
			"reviewed again; 0 for the default, negative: never.")
	zopts := zap.Options{}
	flag.StringVar(&auditLog, "audit-log", "-",
		"Where the audit interceptor writes its JSON lines: - for stdout, or a file path (appended).")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"),
		"The gateway's namespace: a tool server's Service without a namespace is looked up there.")
	flag.Float64Var(&rateLimit, "rate-limit", 20, "The rate_limit interceptor's tool calls per second per identity.")
	flag.IntVar(&rateBurst, "rate-burst", 40, "The rate_limit interceptor's burst per identity.")
	flag.StringVar(&streamURL, "stream-url", "",
		"NATS URL of the run stream (agentrun-stream's listener or a NATS cluster): model stream blocks, tool calls and "+
			"refusals are sent there, buffered and never waited for. Empty: no stream events.")
	flag.StringVar(&streamTLSDir, "stream-tls-cert-dir", "",
		"Directory with tls.crt, tls.key (the gateway's client certificate) and ca.crt (the stream's CA) for --stream-url.")
	flag.StringVar(&leaseName, "lease-name", "",
		"This replica's liveness Lease in --namespace, its heartbeat for every attempt it governs (one write per renewal, "+
			"none per attempt). Default agentrun-gateway-<node> (--node-name), else agentrun-gateway-<hostname>; "+
			"- for none (the gateway then writes each attempt's heartbeatTime while its agent calls).")
	flag.DurationVar(&leaseDuration, "lease-duration", gateway.DefaultLeaseDuration,
		"The liveness Lease's leaseDurationSeconds.")
	flag.DurationVar(&leaseRenew, "lease-renew-interval", gateway.DefaultLeaseRenewInterval,
		"How often the liveness Lease is renewed; keep it well below the runs' heartbeatTimeout.")
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	shutdownTracing, err := tracing.Setup(context.Background(), tracing.Options{
		ServiceName: "agentrun-gateway", Endpoint: otlpEndpoint})
	if err != nil {
		setupLog.Error(err, "Could not set up tracing")
		os.Exit(1)
	}
	defer func() { _ = shutdownTracing(context.Background()) }()

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOptions(metricsAddr, secureMetrics, metricsCertDir, metricsCertName, metricsKeyName),
		PprofBindAddress:       pprofAddr,
		HealthProbeBindAddress: probeAddr,
		// Secrets and reports are read on demand, never cached cluster-wide.
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}},
		}},
	})
	if err != nil {
		setupLog.Error(err, "Could not create the manager")
		os.Exit(1)
	}
	// TokenReviews have a client and limiter of their own: any pod may
	// present tokens, and the reviews they cause must not queue the facts.
	reviewCfg := rest.CopyConfig(cfg)
	reviewCfg.QPS, reviewCfg.Burst = float32(reviewQPS), reviewBurst
	reviews, err := client.New(reviewCfg, client.Options{Scheme: scheme})
	if err != nil {
		setupLog.Error(err, "Could not create the TokenReview client")
		os.Exit(1)
	}
	events, err := streamProducer(mgr, streamURL, streamTLSDir)
	if err != nil {
		setupLog.Error(err, "Could not set up the run stream")
		os.Exit(1)
	}
	var audit io.Writer = os.Stdout
	if auditLog != "-" && auditLog != "" {
		audit = &appendFile{path: auditLog}
	}
	gw, err := gateway.New(gateway.Options{
		AuditLog:  audit,
		Namespace: namespace,
		RateLimit: rateLimit,
		RateBurst: rateBurst,
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Authenticator: &gateway.TokenReviewer{
			Client: reviews, Audience: gatewayapi.Audience, TTL: tokenTTL,
			RejectTTL: rejectTTL, MaxInFlight: maxReviews, Registry: ctrlmetrics.Registry,
		},
		InterceptorAuthenticator: &gateway.TokenReviewer{
			Client: reviews, Audience: gatewayapi.Audience, NoCache: true,
			RejectTTL: rejectTTL, MaxInFlight: maxReviews, Registry: ctrlmetrics.Registry,
		},
		FlushInterval:   flushInterval,
		UpstreamTimeout: upstreamTimeout,
		MinCallTime:     minCallTime,

		MaxModelResponseBytes: maxModelResponse,
		MaxToolResultBytes:    maxToolResult,
		MaxAttemptConcurrency: maxAttemptConcurrency,
		NodeName:              nodeName,

		DurableAdmission: durableAdmission,
		Events:           events,
		Liveness:         liveness(leaseName, namespace, nodeName, leaseDuration, leaseRenew),
		Log:              ctrl.Log.WithName("gateway"),
		Registry:         ctrlmetrics.Registry,
	})
	if err != nil {
		setupLog.Error(err, "Could not create the gateway")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	inf, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.RunAttempt{})
	if err != nil {
		setupLog.Error(err, "Could not watch RunAttempts")
		os.Exit(1)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { observe(gw, o) },
		UpdateFunc: func(_, o any) { observe(gw, o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if ra, ok := o.(*v1alpha1.RunAttempt); ok {
				gw.Forget(types.NamespacedName{Namespace: ra.Namespace, Name: ra.Name})
			}
		},
	}); err != nil {
		setupLog.Error(err, "Could not watch RunAttempts")
		os.Exit(1)
	}

	var tlsCfg *tls.Config
	if certDir != "" {
		cw, err := certwatcher.New(filepath.Join(certDir, certName), filepath.Join(certDir, keyName))
		if err != nil {
			setupLog.Error(err, "Could not load the serving certificate", "dir", certDir)
			os.Exit(1)
		}
		if err := mgr.Add(cw); err != nil {
			setupLog.Error(err, "Could not watch the serving certificate")
			os.Exit(1)
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate,
			NextProtos: []string{"http/1.1"}}
	}
	srv := gateway.NewServer(gw.Handler(), tlsCfg, serverLimits)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		if tlsCfg != nil {
			ln = tls.NewListener(ln, tlsCfg)
		}
		setupLog.Info("Serving agents", "address", ln.Addr().String(), "tls", tlsCfg != nil)
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		// Streams end first, then in-flight requests finish (20s), then the
		// last facts are written with a bound of their own.
		gw.Drain()
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer fcancel()
		if err := gw.Shutdown(fctx); err != nil {
			setupLog.Error(err, "Could not write every attempt's last facts")
		}
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})); err != nil {
		setupLog.Error(err, "Could not add the server")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
		// Ready once the RunAttempt cache has synced: a request before
		// would find no attempt for its pod.
		sctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(sctx) {
			return errors.New("the RunAttempt cache has not synced yet")
		}
		return nil
	}); err != nil {
		os.Exit(1)
	}
	setupLog.Info("Starting agentrun-gateway")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "Gateway stopped")
		os.Exit(1)
	}
}

// metricsOptions serves the metrics as the operator does (cmd/main.go): over
// HTTPS with cert-manager's certificate from certDir (a ServiceMonitor
// verifies it: config/monitoring), to callers allowed get on /metrics
// (ClusterRole agentrun-metrics-reader), HTTP/1.1 only; or, when not secure,
// over plain HTTP for local runs.
func metricsOptions(addr string, secure bool, certDir, certName, keyName string) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if !secure {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	if certDir != "" {
		opts.CertDir, opts.CertName, opts.KeyName = certDir, certName, keyName
	}
	return opts
}

func observe(gw *gateway.Gateway, o any) {
	if ra, ok := o.(*v1alpha1.RunAttempt); ok {
		gw.Observe(ra)
	}
}

// liveness is the gateway's liveness Lease from its flags: --lease-name, by
// default named after the node (one gateway per node, so a restarted or
// replaced instance on the node renews the same Lease), else the host.
func liveness(name, namespace, node string, duration, renew time.Duration) gateway.Liveness {
	if name == "-" {
		return gateway.Liveness{}
	}
	if name == "" {
		host := node
		if host == "" {
			host, _ = os.Hostname()
		}
		name = "agentrun-gateway-" + strings.ToLower(host)
	}
	if namespace == "" {
		namespace = "agentrun-system"
	}
	return gateway.Liveness{
		Lease:    types.NamespacedName{Namespace: namespace, Name: name},
		Duration: duration, RenewInterval: renew,
	}
}
