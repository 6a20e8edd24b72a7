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

// Command research-agent is the reference agent of agentrun: a research loop
// (plan → tool calls → notes → publish sections → settle) on the agent SDK
// (pkg/agent), with a scripted provider for tests and demos
// (internal/research/scripted) and an OpenAI-compatible provider for real
// use. The logic lives in pkg/agent/research, so tests run it in-process. It
// reaches models and reports facts only through agentrun-gateway
// ($AGENTRUN_GATEWAY_URL, with the projected token in $AGENTRUN_TOKEN_FILE);
// it holds no API-server token and no provider key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agentrun-dev/agentrun/internal/research/scripted"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

// Providers (--provider).
const (
	providerScripted = "scripted"
	providerOpenAI   = "openai"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("research-agent", flag.ContinueOnError)
	cfg := research.Config{Agent: agent.ConfigFromEnv(), Exit: os.Exit}
	cfg.Agent.BindFlags(fs)
	var allow, metricsAddr, providerName string
	script := &scripted.Harness{}
	fs.StringVar(&providerName, "provider", providerScripted, "model provider: scripted or openai")
	fs.StringVar(&script.Path, "script", "", "scripted provider: script file (docs/script-format.md)")
	fs.StringVar(&script.Env, "script-env", scripted.EnvScript,
		"scripted provider: environment variable holding the script when --script is not set "+
			"(a pod sets it from a ConfigMap key with valueFrom.configMapKeyRef)")
	fs.StringVar(&cfg.Model, "model", "",
		"model to ask the gateway for: one of the policy's spec.models (default scripted for the scripted provider); "+
			"the gateway swaps in the policy's degradedModel under a Degrade directive")
	var ignored time.Duration
	fs.DurationVar(&ignored, "flush-interval", 0,
		"deprecated and ignored: the gateway coalesces fact writes (its --flush-interval)")
	fs.StringVar(&allow, "http-allow", "",
		"comma-separated hosts http.get may fetch (host, host:port, *.domain); empty allows none")
	fs.BoolVar(&cfg.ObeyAdvice, "obey-advice", false,
		"obey a reviewer's continue after proposing to finish (advice never extends the run: the operator stops it)")
	fs.StringVar(&cfg.NotesPath, "notes-file", "", "append notes to this file (JSON lines); default in memory only")
	fs.IntVar(&cfg.MaxRetries, "max-retries", 3,
		"retries of a retryable provider error (each one a model request within the grant)")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", time.Second,
		"first pause between retries, doubled each time up to 30s")
	fs.DurationVar(&cfg.RateLimitInterval, "rate-limit-interval", 0,
		"rate_limit interceptor: least time between calls (0: none)")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "0", "serve the SDK's metrics on this address (0: off)")
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := zap.New(zap.UseFlagOptions(&zopts))
	cfg.Log = log
	for h := range strings.SplitSeq(allow, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.HTTPAllowlist = append(cfg.HTTPAllowlist, h)
		}
	}
	cfg.Agent.Registry = prometheus.NewRegistry()
	switch providerName {
	case providerScripted:
		script.Configure(&cfg)
	case providerOpenAI:
	default:
		// Said once the agent started, like any provider that cannot start.
		err := fmt.Errorf("unknown provider %q (scripted or openai)", providerName)
		cfg.Hooks.Provider = func(research.Session) (research.Provider, error) { return nil, err }
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if metricsAddr != "" && metricsAddr != "0" {
		srv := &http.Server{Addr: metricsAddr, Handler: promhttp.HandlerFor(cfg.Agent.Registry, promhttp.HandlerOpts{}),
			ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "Could not serve metrics")
			}
		}()
		defer func() { _ = srv.Close() }()
	}

	if err := research.Run(ctx, cfg); err != nil {
		log.Error(err, "Research agent failed")
		fmt.Fprintln(os.Stderr, "research-agent:", err)
		return 1
	}
	return 0
}
