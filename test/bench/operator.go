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
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/agentrun-dev/agentrun/internal/controller"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	webhookv1alpha1 "github.com/agentrun-dev/agentrun/internal/webhook/v1alpha1"
)

// runOperatorMode is `bench operator ...`: the operator's controllers wired as
// cmd/main.go wires them, plus a pprof endpoint, for -profile-operator. It
// runs as its own process, like the real binary; only the wiring is copied,
// the reconcilers are the real ones.
func runOperatorMode(args []string) error {
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	workers := fs.Int("run-workers", 4, "")
	qps := fs.Float64("kube-api-qps", 50, "")
	burst := fs.Int("kube-api-burst", 100, "")
	metricsAddr := fs.String("metrics-bind-address", "0", "")
	probeAddr := fs.String("health-probe-bind-address", "0", "")
	pprofAddr := fs.String("pprof-bind-address", "", "")
	enableWebhooks := fs.Bool("enable-webhooks", false, "serve the admission webhooks, as cmd/main.go does without ENABLE_WEBHOOKS=false")
	webhookHost := fs.String("webhook-host", "", "")
	webhookPort := fs.Int("webhook-port", 9443, "")
	webhookCertPath := fs.String("webhook-cert-path", "", "")
	gatewayURL := fs.String("gateway-url", controller.DefaultGatewayURL, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	var webhookServer webhook.Server
	if *enableWebhooks {
		webhookServer = webhook.NewServer(webhook.Options{Host: *webhookHost, Port: *webhookPort, CertDir: *webhookCertPath})
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "agentrun"})},
		}},
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
		PprofBindAddress:       *pprofAddr,
		WebhookServer:          webhookServer,
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := (&controller.RuntimePolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.SessionReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.ResearchRunReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Clock: clock.RealClock{}, MaxConcurrentReconciles: *workers,
		Gateway: runpod.Gateway{URL: *gatewayURL},
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	if *enableWebhooks {
		for _, setup := range []func(ctrl.Manager) error{
			webhookv1alpha1.SetupRuntimePolicyWebhookWithManager,
			webhookv1alpha1.SetupSessionWebhookWithManager,
			webhookv1alpha1.SetupResearchRunWebhookWithManager,
		} {
			if err := setup(mgr); err != nil {
				return err
			}
		}
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench operator mode: starting manager")
	return mgr.Start(ctx)
}
