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
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// EnvKubeconfig names a kubeconfig file for local runs (outside a pod). In a
// pod the agent uses the in-cluster config and its service-account token.
const EnvKubeconfig = "AGENTRUN_KUBECONFIG"

// EnvPodUID is the pod's UID (downward API), which the operator sets on the
// pod's env. Only a token bound to the pod whose UID is the RunAttempt's
// spec.podUID may write its status, so the agent waits for spec.podUID.
const EnvPodUID = "POD_UID"

// Defaults of Config.
const (
	// DefaultFlushInterval is how often coalesced facts are written: at most
	// one status write per interval (write-ahead records and other urgent
	// facts are written at once).
	DefaultFlushInterval = time.Second
	// DefaultHeartbeatInterval is used when the RunAttempt sets none.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultPollInterval is how often the RunAttempt is re-read when the
	// client cannot watch, and the pause before a watch is re-established.
	DefaultPollInterval = 2 * time.Second
	// DefaultMaxConflictRetries is how many times one write re-reads the
	// RunAttempt and re-applies the local facts after a conflict before it
	// waits for the next flush interval.
	DefaultMaxConflictRetries = 10
	// DefaultBufferSize is how many failed outputs a buffered interceptor
	// keeps for resending.
	DefaultBufferSize = 256
)

// Config says where the agent's RunAttempt is and how to reach the API
// server. The zero value plus ConfigFromEnv is what a pod needs.
type Config struct {
	// Client talks to the API server. Optional: when nil one is built from
	// RESTConfig, else from Kubeconfig, else from the in-cluster config. A
	// client.WithWatch lets the agent watch its RunAttempt; any other client
	// is polled every PollInterval. Its scheme must know the agentrun.dev
	// types (see Scheme).
	Client client.Client
	// RESTConfig is used to build Client when Client is nil.
	RESTConfig *rest.Config
	// Kubeconfig is a kubeconfig path for local runs (env AGENTRUN_KUBECONFIG,
	// flag --kubeconfig); used when Client and RESTConfig are nil.
	Kubeconfig string

	// Namespace of the RunAttempt (env AGENTRUN_NAMESPACE).
	Namespace string
	// RunAttempt is the RunAttempt's name (env AGENTRUN_RUNATTEMPT; when
	// unset, <AGENTRUN_RUN>-<AGENTRUN_ATTEMPT>).
	RunAttempt string
	// PodUID is this pod's UID (env POD_UID). When set, Start waits until
	// the operator has recorded it as the RunAttempt's spec.podUID (the
	// API server admits status writes only from that pod) and refuses to
	// start if the RunAttempt names another pod. Empty (local runs,
	// in-process tests): no check.
	PodUID string

	// Clock is the only source of time (timers, heartbeats, stamps). Tests
	// inject k8s.io/utils/clock/testing.FakeClock. Default: the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// FlushInterval is the coalescing interval of fact writes (default 1s).
	FlushInterval time.Duration
	// PollInterval: see DefaultPollInterval.
	PollInterval time.Duration
	// MaxConflictRetries: see DefaultMaxConflictRetries.
	MaxConflictRetries int
	// BufferSize bounds each buffered interceptor's resend buffer (default 256).
	BufferSize int

	// Log receives the SDK's logs. Default: discard.
	Log logr.Logger
	// Registry receives the SDK's metrics; default: a new registry, exposed
	// by Agent.Metrics.
	Registry *prometheus.Registry
}

// ConfigFromEnv returns a Config filled from the pod's environment:
// AGENTRUN_NAMESPACE, AGENTRUN_RUNATTEMPT (or AGENTRUN_RUN and
// AGENTRUN_ATTEMPT) and AGENTRUN_KUBECONFIG.
func ConfigFromEnv() Config {
	c := Config{
		Namespace:  os.Getenv(v1alpha1.EnvNamespace),
		RunAttempt: os.Getenv(v1alpha1.EnvRunAttempt),
		Kubeconfig: os.Getenv(EnvKubeconfig),
		PodUID:     os.Getenv(EnvPodUID),
	}
	if c.RunAttempt == "" {
		if run, n := os.Getenv(v1alpha1.EnvRun), os.Getenv(v1alpha1.EnvAttempt); run != "" && n != "" {
			c.RunAttempt = run + "-" + n
		}
	}
	return c
}

// BindFlags registers --kubeconfig, --namespace, --runattempt and
// --flush-interval on fs, with the current values (e.g. from ConfigFromEnv)
// as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig,
		"kubeconfig file for local runs (default $"+EnvKubeconfig+"; in a pod the in-cluster config is used)")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace,
		"namespace of the RunAttempt (default $"+v1alpha1.EnvNamespace+")")
	fs.StringVar(&c.RunAttempt, "runattempt", c.RunAttempt, "name of the RunAttempt (default $"+v1alpha1.EnvRunAttempt+")")
	fs.DurationVar(&c.FlushInterval, "flush-interval", c.FlushInterval, "coalescing interval of fact writes (default 1s)")
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxConflictRetries <= 0 {
		c.MaxConflictRetries = DefaultMaxConflictRetries
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
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, fmt.Errorf("no namespace: set $%s or --namespace", v1alpha1.EnvNamespace))
	}
	if c.RunAttempt == "" {
		errs = append(errs, fmt.Errorf("no RunAttempt name: set $%s or --runattempt", v1alpha1.EnvRunAttempt))
	}
	return errors.Join(errs...)
}

// Scheme returns a scheme with the Kubernetes built-in types and the
// agentrun.dev types, for clients the agent uses.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// RESTConfigOrDefault returns the REST config c describes: RESTConfig, else the
// kubeconfig file, else the in-cluster config.
func (c Config) RESTConfigOrDefault() (*rest.Config, error) {
	switch {
	case c.RESTConfig != nil:
		return c.RESTConfig, nil
	case c.Kubeconfig != "":
		rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("agent: kubeconfig %s: %w", c.Kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("agent: not in a pod and no kubeconfig given ($%s or --kubeconfig): %w", EnvKubeconfig, err)
	}
	return rc, nil
}

// NewClient returns the client c describes: Client, or a watching client
// built from RESTConfigOrDefault with Scheme.
func (c Config) NewClient() (client.Client, error) {
	if c.Client != nil {
		return c.Client, nil
	}
	rc, err := c.RESTConfigOrDefault()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(rc, client.Options{Scheme: Scheme()})
}
