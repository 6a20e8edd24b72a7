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

// Package conformance is the gateway's protocol conformance suite: a real
// agentrun-gateway (internal/gateway, in front of a fake API server holding
// one RunAttempt) that every client's tests run against — the Go SDK here,
// the Python SDK and the OpenAI-SDK examples through the server binary
// (./test/conformance/server), which prints a Manifest line and serves until
// its stdin closes.
//
// The harness plays the operator's part the clients depend on: when the
// working grant is used up it moves the attempt to Finalizing and adds the
// output reserve to the grant; when the publication settles it moves the
// run to Terminated. Commands on stdin (one JSON object a line) approve or
// deny an action, or terminate the run.
package conformance

import (
	"context"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Config shapes the conformance attempt.
type Config struct {
	// ModelRequests and ToolCalls are the working grant (defaults 4 and 10).
	ModelRequests, ToolCalls int64
	// ReserveModelRequests and ReserveToolCalls are the output reserve the
	// harness adds when the run finalizes (defaults 1 and 2).
	ReserveModelRequests, ReserveToolCalls int64
	// PublishRisk is report.publish's risk: Medium (default; auto-approved in
	// Auto mode) or High (every publication waits for an approval).
	PublishRisk v1alpha1.Risk
	// TLS serves HTTPS with a self-signed certificate (written to CAFile).
	TLS bool
	// Dir receives the token and CA files (default: a new temporary dir).
	Dir string
}

// Manifest is what a client needs to reach the conformance gateway: the
// server prints it as one JSON line.
type Manifest struct {
	URL   string `json:"url"`
	Token string `json:"token"`
	Model string `json:"model"`
	// TokenFile holds Token; CAFile the gateway's certificate ("" over HTTP).
	TokenFile string `json:"tokenFile"`
	CAFile    string `json:"caFile,omitempty"`
	// Env is the environment of an attempt pod (AGENTRUN_GATEWAY_URL, ...).
	Env map[string]string `json:"env"`
	// Grant and Reserve are the working grant and the output reserve.
	Grant   v1alpha1.Grant `json:"grant"`
	Reserve v1alpha1.Grant `json:"reserve"`
}

// Server is a running conformance gateway.
type Server struct {
	Env      *gatewaytest.Env
	Manifest Manifest

	cfg    Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   func()
	update sync.Mutex
}

// Start starts a conformance gateway.
func Start(cfg Config) (*Server, error) {
	if cfg.ModelRequests <= 0 {
		cfg.ModelRequests = 4
	}
	if cfg.ToolCalls <= 0 {
		cfg.ToolCalls = 10
	}
	if cfg.ReserveModelRequests <= 0 {
		cfg.ReserveModelRequests = 1
	}
	if cfg.ReserveToolCalls <= 0 {
		cfg.ReserveToolCalls = 2
	}
	if cfg.PublishRisk == "" {
		cfg.PublishRisk = v1alpha1.RiskMedium
	}
	ownDir := cfg.Dir == ""
	if ownDir {
		d, err := os.MkdirTemp("", "agentrun-conformance-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	env, stop, err := gatewaytest.Standalone(gatewaytest.Options{
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Grant = v1alpha1.Grant{ModelRequests: cfg.ModelRequests, ToolCalls: cfg.ToolCalls}
			for i := range ra.Spec.Policy.Tools {
				if ra.Spec.Policy.Tools[i].Name == gatewayapi.ToolReportPublish {
					ra.Spec.Policy.Tools[i].Risk = cfg.PublishRisk
				}
			}
			ra.Spec.Policy.AutoApprove = []string{"notes.write", gatewayapi.ToolReportPublish}
		},
	}, cfg.TLS)
	if err != nil {
		return nil, err
	}
	s := &Server{Env: env, cfg: cfg, stop: stop}
	if ownDir {
		s.stop = func() { stop(); _ = os.RemoveAll(cfg.Dir) }
	}
	tokenFile := filepath.Join(cfg.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(gatewaytest.Token+"\n"), 0o600); err != nil {
		s.stop()
		return nil, err
	}
	m := Manifest{
		URL: env.URL(), Token: gatewaytest.Token, Model: gatewaytest.Model, TokenFile: tokenFile,
		Grant:   v1alpha1.Grant{ModelRequests: cfg.ModelRequests, ToolCalls: cfg.ToolCalls},
		Reserve: v1alpha1.Grant{ModelRequests: cfg.ReserveModelRequests, ToolCalls: cfg.ReserveToolCalls},
	}
	m.Env = map[string]string{
		gatewayapi.EnvGatewayURL:    m.URL,
		gatewayapi.EnvTokenFile:     tokenFile,
		gatewayapi.EnvOpenAIBaseURL: m.URL + gatewayapi.ModelPathPrefix,
		// The Anthropic SDKs append /v1/messages themselves.
		gatewayapi.EnvAnthropicBaseURL: m.URL,
	}
	if cfg.TLS {
		m.CAFile = filepath.Join(cfg.Dir, "ca.crt")
		pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: env.Server.Certificate().Raw})
		if err := os.WriteFile(m.CAFile, pemBytes, 0o644); err != nil {
			stop()
			return nil, err
		}
		m.Env[gatewayapi.EnvCAFile] = m.CAFile
		m.Env["NODE_EXTRA_CA_CERTS"] = m.CAFile
	}
	s.Manifest = m
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go s.operator(ctx)
	return s, nil
}

// Close stops the gateway.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	s.stop()
}

// operator plays the operator's part: Finalizing once the working grant is
// used up and a call was refused at it (the reserve added), Terminated once
// the publication settled.
func (s *Server) operator(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ra := &v1alpha1.RunAttempt{}
		if err := s.Env.Client.Get(ctx, s.Env.Key, ra); err != nil {
			continue
		}
		st, spec := ra.Status, ra.Spec
		switch {
		case spec.RunPhase == v1alpha1.PhaseTerminated:
		case st.Publication.Settled:
			_ = s.UpdateSpec(func(sp *v1alpha1.RunAttemptSpec) { sp.RunPhase = v1alpha1.PhaseTerminated })
		case spec.RunPhase == v1alpha1.PhaseRunning && refusedAtTheGrant(st) &&
			(st.Usage.ModelRequests >= spec.Grant.ModelRequests || st.Usage.ToolCalls >= spec.Grant.ToolCalls):
			_ = s.UpdateSpec(func(sp *v1alpha1.RunAttemptSpec) {
				sp.RunPhase = v1alpha1.PhaseFinalizing
				sp.Grant.FinalizeOnly = true
				sp.Grant.ModelRequests = st.Usage.ModelRequests + s.cfg.ReserveModelRequests
				sp.Grant.ToolCalls = st.Usage.ToolCalls + s.cfg.ReserveToolCalls
			})
		}
	}
}

// refusedAtTheGrant reports whether the gateway refused a call at the grant
// (a GrantExhausted fault): the harness moves to Finalizing only then, so a
// client always sees the refusal before the reserve is granted.
func refusedAtTheGrant(st v1alpha1.RunAttemptStatus) bool {
	for _, f := range st.Faults {
		if f.Kind == "GrantExhausted" && f.Count > 0 {
			return true
		}
	}
	return false
}

// UpdateSpec changes the RunAttempt's spec as the operator would and tells
// the gateway, as its informer would.
func (s *Server) UpdateSpec(mutate func(*v1alpha1.RunAttemptSpec)) error {
	s.update.Lock()
	defer s.update.Unlock()
	ctx := context.Background()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ra := &v1alpha1.RunAttempt{}
		if err := s.Env.Client.Get(ctx, s.Env.Key, ra); err != nil {
			return err
		}
		mutate(&ra.Spec)
		ra.Generation++
		if err := s.Env.Client.Update(ctx, ra); err != nil {
			return err
		}
		s.Env.Gateway.Observe(ra)
		return nil
	})
}

// Command is one stdin command of the server.
type Command struct {
	// Approve or Deny names an action id to decide.
	Approve string `json:"approve,omitempty"`
	Deny    string `json:"deny,omitempty"`
	// Terminate ends the run (phase Terminated).
	Terminate bool `json:"terminate,omitempty"`
	// Status asks for the RunAttempt's status as the API server holds it.
	Status bool `json:"status,omitempty"`
}

// Do carries out a command and returns the answer to print.
func (s *Server) Do(c Command) (any, error) {
	switch {
	case c.Approve != "" || c.Deny != "":
		id, d := c.Approve, v1alpha1.DecisionApprove
		if c.Deny != "" {
			id, d = c.Deny, v1alpha1.DecisionDeny
		}
		return map[string]bool{"ok": true}, s.UpdateSpec(func(sp *v1alpha1.RunAttemptSpec) {
			ap := gatewaytest.Decision(id, d)
			ap.Approver = "conformance"
			sp.Approvals = append(sp.Approvals, ap)
		})
	case c.Terminate:
		return map[string]bool{"ok": true}, s.UpdateSpec(func(sp *v1alpha1.RunAttemptSpec) { sp.RunPhase = v1alpha1.PhaseTerminated })
	case c.Status:
		ra := &v1alpha1.RunAttempt{}
		if err := s.Env.Client.Get(context.Background(), s.Env.Key, ra); err != nil {
			return nil, err
		}
		return map[string]any{"spec": ra.Spec, "status": ra.Status}, nil
	}
	return nil, fmt.Errorf("unknown command %+v", c)
}
