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

package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Defaults of Config.
const (
	// DefaultPollInterval is the pause before the attempt watch is
	// re-established after it ends.
	DefaultPollInterval = 2 * time.Second
	// DefaultHeartbeatInterval is used until the gateway says otherwise.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultBufferSize is how many failed outputs a buffered interceptor
	// keeps for resending.
	DefaultBufferSize = 256
	// MaxCheckpoint is the longest checkpoint, in bytes.
	MaxCheckpoint = 4096
)

// Config says where the gateway is and how the agent proves who it is. The
// zero value plus ConfigFromEnv is what an attempt pod needs: the operator
// sets AGENTRUN_GATEWAY_URL, AGENTRUN_TOKEN_FILE (a projected
// service-account token of audience agentrun-gateway) and
// AGENTRUN_GATEWAY_CA_FILE on every container.
type Config struct {
	// GatewayURL is the gateway's base URL, e.g. https://agentrun-gateway.agentrun-system.svc:8443.
	GatewayURL string
	// TokenFile holds the bearer token; it is re-read on every request
	// (the kubelet rotates it).
	TokenFile string
	// Token is a fixed bearer token, used when TokenFile is empty (tests).
	Token string
	// CAFile is a PEM bundle to trust for the gateway's certificate (in
	// addition to the system roots).
	CAFile string
	// HTTPClient talks to the gateway (default: built from CAFile). Its
	// timeout must not cut the attempt watch (a stream): leave it 0.
	HTTPClient *http.Client
	// Traceparent is the W3C traceparent of the attempt's run (the pod's
	// $TRACEPARENT, set when the operator traces): sent to the gateway on
	// every request without one, so its spans join the run's trace.
	Traceparent string

	// Clock is the only source of time (timers, heartbeats). Default real.
	Clock clock.WithTickerAndDelayedExecution
	// PollInterval: see DefaultPollInterval.
	PollInterval time.Duration
	// BufferSize bounds each buffered interceptor's resend buffer (default 256).
	BufferSize int

	// Log receives the SDK's logs. Default: discard.
	Log logr.Logger
	// Registry receives the SDK's metrics; default: a new registry, exposed
	// by Agent.Metrics.
	Registry *prometheus.Registry
}

// ConfigFromEnv returns a Config filled from the pod's environment.
func ConfigFromEnv() Config {
	return Config{
		GatewayURL:  os.Getenv(gatewayapi.EnvGatewayURL),
		TokenFile:   os.Getenv(gatewayapi.EnvTokenFile),
		CAFile:      os.Getenv(gatewayapi.EnvCAFile),
		Traceparent: os.Getenv(EnvTraceparent),
	}
}

// BindFlags registers --gateway-url, --token-file and --gateway-ca-file on
// fs, with the current values (e.g. from ConfigFromEnv) as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GatewayURL, "gateway-url", c.GatewayURL,
		"the gateway's base URL (default $"+gatewayapi.EnvGatewayURL+")")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile,
		"file holding the gateway token (default $"+gatewayapi.EnvTokenFile+")")
	fs.StringVar(&c.CAFile, "gateway-ca-file", c.CAFile,
		"PEM bundle that signs the gateway's certificate (default $"+gatewayapi.EnvCAFile+")")
}

func (c Config) withDefaults() (Config, error) {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.BufferSize <= 0 {
		c.BufferSize = DefaultBufferSize
	}
	if c.Log.GetSink() == nil {
		c.Log = logr.Discard()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	c.GatewayURL = strings.TrimSuffix(c.GatewayURL, "/")
	if c.HTTPClient == nil {
		hc, err := HTTPClient(c.CAFile)
		if err != nil {
			return c, err
		}
		c.HTTPClient = hc
	}
	return c, nil
}

func (c Config) validate() error {
	var errs []error
	if c.GatewayURL == "" {
		errs = append(errs, fmt.Errorf("no gateway: set $%s or --gateway-url", gatewayapi.EnvGatewayURL))
	}
	if c.TokenFile == "" && c.Token == "" {
		errs = append(errs, fmt.Errorf("no token: set $%s or --token-file", gatewayapi.EnvTokenFile))
	}
	return errors.Join(errs...)
}

// HTTPClient returns an HTTP client that trusts the system roots and, when
// caFile is set, the certificates in it.
func HTTPClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("agent: gateway CA %s: %w", caFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("agent: gateway CA %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}
