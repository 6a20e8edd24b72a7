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
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// streamProducer returns the run stream's producer (nil without a URL): a
// bounded buffer that publishes in the background to NATS, connecting when
// it first can, so the gateway starts and serves whether or not the stream
// is up.
func streamProducer(mgr ctrl.Manager, url, tlsDir string) (gateway.Emitter, error) {
	if url == "" {
		return nil, nil
	}
	m := store.NewMetrics(ctrlmetrics.Registry)
	cfg := store.Config{URL: url, Attach: true, Metrics: m}
	if tlsDir != "" {
		cfg.NATSOptions = []nats.Option{
			nats.ClientCert(filepath.Join(tlsDir, "tls.crt"), filepath.Join(tlsDir, "tls.key")),
			nats.RootCAs(filepath.Join(tlsDir, "ca.crt")),
		}
	}
	lazy := store.NewLazy(cfg)
	p := store.NewProducer(lazy, store.ProducerOptions{Metrics: m})
	err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		pctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { p.Run(pctx); close(done) }()
		<-ctx.Done()
		// The last events get a short bound of their own.
		fctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := p.Flush(fctx); err != nil {
			setupLog.Info("Run stream events were left unpublished at shutdown", "events", p.Len())
		}
		stop()
		<-done
		lazy.Close()
		return nil
	}))
	return p, err
}
