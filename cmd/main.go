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

package main

import (
	"context"
	"crypto/tls"
	"flag"
	"os"
	"time"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	// to ensure that exec-entrypoint and run can make use of them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/controller"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/internal/tracing"
	webhookv1alpha1 "github.com/agentrun-dev/agentrun/internal/webhook/v1alpha1"
	// +kubebuilder:scaffold:imports
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))

	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	// +kubebuilder:scaffold:scheme
}

// nolint:gocyclo
func main() {
	var metricsAddr string
	var metricsCertPath, metricsCertName, metricsCertKey string
	var webhookCertPath, webhookCertName, webhookCertKey string
	var webhookPort int
	var enableLeaderElection bool
	var probeAddr string
	var secureMetrics bool
	var enableHTTP2 bool
	var tlsOpts []func(*tls.Config)
	var leaderElectionNamespace, webhookHost string
	var workers int
	var factGrace, progressWrites time.Duration
	var gatewayURL, gatewayCAFile, gatewayNamespace string
	var attemptEgress bool
	var qps float64
	var burst int
	var pprofAddr, otlpEndpoint string
	flag.StringVar(&pprofAddr, "pprof-bind-address", "",
		"Address of the pprof endpoint (/debug/pprof/, e.g. 127.0.0.1:8082). Empty: off.")
	flag.StringVar(&otlpEndpoint, "otlp-endpoint", "",
		"OTLP endpoint spans are exported to (a run's lifecycle transitions); overrides $"+tracing.EnvEndpoint+
			". Empty and no variable set: no tracing.")
	flag.IntVar(&workers, "run-workers", 4, "Concurrent ResearchRun reconciles.")
	flag.DurationVar(&factGrace, "fact-grace", controller.DefaultFactGrace,
		"How long after an attempt's pod stopped on its own the operator waits for the gateway's last "+
			"coalesced facts (usage, steps) before judging them, unless they are final already; "+
			"about twice the gateway's --flush-interval. 0: no wait.")
	flag.DurationVar(&progressWrites, "progress-write-interval", controller.DefaultProgressWriteInterval,
		"At most one status write per run per this interval that only reports progress (usage, steps); "+
			"a write that decides anything is never held back. 0: no pacing.")
	flag.StringVar(&gatewayURL, "gateway-url", controller.DefaultGatewayURL,
		"Base URL attempt pods reach agentrun-gateway at (set on every attempt container).")
	flag.BoolVar(&attemptEgress, "attempt-network-policy", true,
		"Keep NetworkPolicy agentrun-attempt-egress in every namespace with attempts: "+
			"attempt pods reach only the gateway and DNS.")
	flag.StringVar(&gatewayNamespace, "gateway-namespace", "agentrun-system",
		"Namespace of the gateway's pods (for the egress NetworkPolicy) and of their liveness Leases.")
	flag.StringVar(&gatewayCAFile, "gateway-ca-file", "",
		"PEM bundle that signs the gateway's certificate; the operator keeps it in ConfigMap "+
			runpod.DefaultGatewayCAConfigMap+" of every namespace with attempts. Empty: the certificate is publicly trusted.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader-election Lease (default: the pod's namespace; required outside a cluster).")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to (default: all interfaces).")
	flag.Float64Var(&qps, "kube-api-qps", 50, "Client-side QPS limit for requests to the API server.")
	flag.IntVar(&burst, "kube-api-burst", 100, "Client-side burst for requests to the API server.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. "+
			"Enabling this will ensure there is only one active controller manager.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	flag.StringVar(&webhookCertName, "webhook-cert-name", "tls.crt", "The name of the webhook certificate file.")
	flag.StringVar(&webhookCertKey, "webhook-cert-key", "tls.key", "The name of the webhook key file.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on. "+
		"Defaults to 9443. Set -1 to disable the webhook server.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsCertKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers")
	opts := zap.Options{
		Development: false,
	}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	shutdownTracing, err := tracing.Setup(context.Background(), tracing.Options{
		ServiceName: "agentrun-operator", Endpoint: otlpEndpoint})
	if err != nil {
		setupLog.Error(err, "Failed to set up tracing")
		os.Exit(1)
	}
	defer func() { _ = shutdownTracing(context.Background()) }()

	// if the enable-http2 flag is false (the default), http/2 should be disabled
	// due to its vulnerabilities. More specifically, disabling http/2 will
	// prevent from being vulnerable to the HTTP/2 Stream Cancellation and
	// Rapid Reset CVEs. For more information see:
	// - https://github.com/advisories/GHSA-qppj-fm5r-hxr3
	// - https://github.com/advisories/GHSA-4374-p667-p6c8
	disableHTTP2 := func(c *tls.Config) {
		setupLog.Info("Disabling HTTP/2")
		c.NextProtos = []string{"http/1.1"}
	}

	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, disableHTTP2)
	}

	// Initial webhook TLS options
	webhookTLSOpts := tlsOpts
	webhookServerOptions := webhook.Options{
		TLSOpts: webhookTLSOpts,
		Host:    webhookHost,
		Port:    webhookPort,
	}

	if len(webhookCertPath) > 0 {
		setupLog.Info("Initializing webhook certificate watcher using provided certificates",
			"webhook-cert-path", webhookCertPath, "webhook-cert-name", webhookCertName, "webhook-cert-key", webhookCertKey)

		webhookServerOptions.CertDir = webhookCertPath
		webhookServerOptions.CertName = webhookCertName
		webhookServerOptions.KeyName = webhookCertKey
	}

	webhookServer := webhook.NewServer(webhookServerOptions)

	// Metrics endpoint is enabled in 'config/default/kustomization.yaml'. The Metrics options configure the server.
	// More info:
	// - https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/server
	// - https://book.kubebuilder.io/reference/metrics.html
	metricsServerOptions := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}

	if secureMetrics {
		// FilterProvider is used to protect the metrics endpoint with authn/authz.
		// These configurations ensure that only authorized users and service accounts
		// can access the metrics endpoint. The RBAC are configured in 'config/rbac/kustomization.yaml'. More info:
		// https://pkg.go.dev/sigs.k8s.io/controller-runtime@v0.25.0/pkg/metrics/filters#WithAuthenticationAndAuthorization
		metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	// If the certificate is not specified, controller-runtime will automatically
	// generate self-signed certificates for the metrics server. While convenient for development and testing,
	// this setup is not recommended for production.
	//
	// TODO(user): If you enable certManager, uncomment the following lines:
	// - [METRICS-WITH-CERTS] at config/default/kustomization.yaml to generate and use certificates
	// managed by cert-manager for the metrics server.
	// - [PROMETHEUS-WITH-CERTS] at config/prometheus/kustomization.yaml for TLS certification.
	if len(metricsCertPath) > 0 {
		setupLog.Info("Initializing metrics certificate watcher using provided certificates",
			"metrics-cert-path", metricsCertPath, "metrics-cert-name", metricsCertName, "metrics-cert-key", metricsCertKey)

		metricsServerOptions.CertDir = metricsCertPath
		metricsServerOptions.CertName = metricsCertName
		metricsServerOptions.KeyName = metricsCertKey
	}

	restConfig := ctrl.GetConfigOrDie()
	restConfig.QPS, restConfig.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		// Cache only the pods this operator creates, not every pod in the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "agentrun"})},
			// The gateways' liveness Leases (internal/controller/liveness.go).
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{gatewayNamespace: {}}},
		}},
		Metrics:                 metricsServerOptions,
		PprofBindAddress:        pprofAddr,
		WebhookServer:           webhookServer,
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "agentrun.agentrun.dev",
		LeaderElectionNamespace: leaderElectionNamespace,
		// The leader steps down on SIGTERM so a replacement takes over at once.
		LeaderElectionReleaseOnCancel: true,
		// LeaderElectionReleaseOnCancel defines if the leader should step down voluntarily
		// when the Manager ends. This requires the binary to immediately end when the
		// Manager is stopped, otherwise, this setting is unsafe. Setting this significantly
		// speeds up voluntary leader transitions as the new leader don't have to wait
		// LeaseDuration time first.
		//
		// In the default scaffold provided, the program ends immediately after
		// the manager stops, so would be fine to enable this option. However,
		// if you are doing or is intended to do any operation such as perform cleanups
		// after the manager stops then its usage might be unsafe.
		// LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "Failed to start manager")
		os.Exit(1)
	}

	if err := controller.SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		setupLog.Error(err, "Failed to set up cache indexes")
		os.Exit(1)
	}
	if err := (&controller.RuntimePolicyReconciler{
		Client: mgr.GetClient(),
		Scheme: mgr.GetScheme(),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to create controller", "controller", "runtimepolicy")
		os.Exit(1)
	}
	if err := (&controller.SessionReconciler{
		Client: mgr.GetClient(),
		Scheme: mgr.GetScheme(),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to create controller", "controller", "session")
		os.Exit(1)
	}
	var gatewayCA []byte
	if gatewayCAFile != "" {
		if gatewayCA, err = os.ReadFile(gatewayCAFile); err != nil {
			setupLog.Error(err, "Failed to read the gateway CA", "file", gatewayCAFile)
			os.Exit(1)
		}
	}
	if err := (&controller.ResearchRunReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Scheme:                  mgr.GetScheme(),
		Clock:                   clock.RealClock{},
		MaxConcurrentReconciles: workers,
		Gateway:                 runpod.Gateway{URL: gatewayURL},
		GatewayCA:               gatewayCA,
		GatewayCAFile:           gatewayCAFile,
		AttemptEgress:           egressPolicy(attemptEgress, gatewayNamespace),
		FactGrace:               noWaitIfZero(factGrace),
		ProgressWriteInterval:   noWaitIfZero(progressWrites),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to create controller", "controller", "researchrun")
		os.Exit(1)
	}
	// nolint:goconst
	if os.Getenv("ENABLE_WEBHOOKS") != "false" {
		if err := webhookv1alpha1.SetupRuntimePolicyWebhookWithManager(mgr); err != nil {
			setupLog.Error(err, "Failed to create webhook", "webhook", "RuntimePolicy")
			os.Exit(1)
		}
	}
	// nolint:goconst
	if os.Getenv("ENABLE_WEBHOOKS") != "false" {
		if err := webhookv1alpha1.SetupSessionWebhookWithManager(mgr); err != nil {
			setupLog.Error(err, "Failed to create webhook", "webhook", "Session")
			os.Exit(1)
		}
	}
	// nolint:goconst
	if os.Getenv("ENABLE_WEBHOOKS") != "false" {
		if err := webhookv1alpha1.SetupResearchRunWebhookWithManager(mgr); err != nil {
			setupLog.Error(err, "Failed to create webhook", "webhook", "ResearchRun")
			os.Exit(1)
		}
	}
	// +kubebuilder:scaffold:builder

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up ready check")
		os.Exit(1)
	}
	// Every replica serves the webhooks, leader or not (the webhook server
	// needs no leadership); a replica is in the webhook Service's endpoints
	// only once its webhook server answers TLS.
	// nolint:goconst
	if os.Getenv("ENABLE_WEBHOOKS") != "false" {
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			setupLog.Error(err, "Failed to set up the webhook ready check")
			os.Exit(1)
		}
	}

	setupLog.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Failed to run manager")
		os.Exit(1)
	}
}

func egressPolicy(enabled bool, gatewayNamespace string) *networkingv1.NetworkPolicy {
	if !enabled {
		return nil
	}
	return controller.AttemptEgressPolicy(gatewayNamespace)
}

// noWaitIfZero maps a duration flag (--fact-grace, --progress-write-interval)
// to its ResearchRunReconciler field, whose zero value is the default: a flag
// of 0 asks for no wait.
func noWaitIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
