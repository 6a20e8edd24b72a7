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

package agent_test

import (
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// Directives reach the agent loop through an accessor, a channel and a
// callback, as soon as the gateway sees them.
func TestDirectivesSurfaced(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan []v1.Directive, 4)
	a := e.newAgent(func(a *agent.Agent) {
		a.OnDirectives(func(d []v1.Directive) { got <- d })
	})
	e.start(a)
	e.g.Eventually(got, wait).Should(Receive(BeEmpty()), "the initial (empty) set")

	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		s.Directives = []v1.Directive{{Type: v1.DirectiveDegrade, Gate: v1.GateBudget, Message: "6/8 model requests"}}
	})
	e.g.Eventually(got, wait).Should(Receive(ConsistOf(HaveField("Type", v1.DirectiveDegrade))))
	e.g.Expect(a.HasDirective(v1.DirectiveDegrade)).To(BeTrue())
	e.g.Expect(a.HasDirective(v1.DirectiveCompress)).To(BeFalse())

	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		s.Directives = append(s.Directives, v1.Directive{Type: v1.DirectiveCompress, Gate: v1.GateBudget})
	})
	var latest []v1.Directive
	e.g.Eventually(func() int {
		select {
		case latest = <-a.DirectiveUpdates():
		default:
		}
		return len(latest)
	}, wait, poll).Should(Equal(2))
	e.g.Expect(a.HasDirective(v1.DirectiveCompress)).To(BeTrue())
	e.g.Expect(a.Directives()).To(HaveLen(2))
}

// The attempt's view follows the RunAttempt: grant, mode, approvals and
// goal, and the usage the gateway counted.
func TestAttemptView(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(func(a *agent.Agent) { e.tools(a, nil) })
	ctx := e.start(a)
	v := a.Attempt()
	e.g.Expect(v.Namespace).To(Equal(gatewaytest.Namespace))
	e.g.Expect(v.RunAttempt).To(Equal(gatewaytest.RunAttempt))
	e.g.Expect(v.Run).To(Equal(gatewaytest.Run))
	e.g.Expect(v.Goal).To(Equal("survey the field"))
	e.g.Expect(v.Grant).To(Equal(v1.Grant{ModelRequests: 10, ToolCalls: 10}))
	e.g.Expect(v.Models).To(ConsistOf(gatewaytest.Model, gatewaytest.DegradedModel))
	e.g.Expect(v.Mode).To(Equal(v1.ModeAuto))

	_, err := a.CallTool(ctx, "http.get", map[string]any{"url": "u"})
	e.g.Expect(err).NotTo(HaveOccurred())
	e.UpdateSpec(func(s *v1.RunAttemptSpec) {
		s.Grant.ModelRequests = 12
		s.Mode = v1.ModeEdit
		s.Approvals = []v1.Approval{{ActionID: "x-1", Decision: v1.DecisionDeny}}
	})
	e.g.Eventually(func() gatewayapi.Attempt { return a.Attempt() }, wait, poll).Should(And(
		HaveField("Grant.ModelRequests", int64(12)),
		HaveField("Mode", v1.ModeEdit),
		HaveField("Used.ToolCalls", int64(1)),
	))
	ap, ok := a.ApprovalFor("x-1")
	e.g.Expect(ok).To(BeTrue())
	e.g.Expect(ap.Decision).To(Equal(v1.DecisionDeny))
}

// An idle agent still shows it is alive: its heartbeats reach the gateway,
// which writes status.heartbeatTime.
func TestHeartbeat(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) {
		ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: time.Second}
	})
	e.start(e.newAgent(nil))
	hb := func() time.Time {
		if h := e.status().HeartbeatTime; h != nil {
			return h.Time
		}
		return time.Time{}
	}
	e.g.Eventually(hb, wait, poll).ShouldNot(BeZero())
	first := hb()
	// heartbeatTime has a resolution of a second on the API server.
	e.g.Eventually(hb, wait, poll).Should(BeTemporally(">", first))
	e.g.Expect(e.Metric("agentrun_gateway_request_seconds", map[string]string{"route": "heartbeat"})).To(BeNumerically(">=", 1))
}

// Checkpoints are reported as they are; one beyond the bound is refused.
func TestCheckpoint(t *testing.T) {
	e := newEnv(t, nil)
	a := e.newAgent(nil)
	ctx := e.start(a)
	e.g.Expect(a.SetCheckpoint(ctx, `{"step":5}`)).To(Succeed())
	e.g.Eventually(func() string { return e.status().Checkpoint }, wait, poll).Should(Equal(`{"step":5}`))
	e.g.Expect(a.SetCheckpoint(ctx, strings.Repeat("x", agent.MaxCheckpoint+1))).To(MatchError(ContainSubstring("exceeds 4096")))
	e.g.Consistently(func() string { return e.status().Checkpoint }, 50*time.Millisecond, poll).Should(Equal(`{"step":5}`))
}

// Start waits while the operator has not yet recorded the pod on its
// RunAttempt (nothing is written meanwhile), and refuses a RunAttempt that
// names another pod.
func TestStartWaitsForItsPod(t *testing.T) {
	e := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.PodUID = "" })
	a := e.newAgent(nil)
	started := make(chan error, 1)
	go func() {
		_, err := a.Start(context.Background())
		started <- err
	}()
	e.g.Consistently(started, 300*time.Millisecond).ShouldNot(Receive())
	e.g.Expect(e.Writes.Load()).To(BeZero())
	e.UpdateSpec(func(s *v1.RunAttemptSpec) { s.PodUID = gatewaytest.PodUID })
	e.g.Eventually(started, wait).Should(Receive(BeNil()))
	e.g.Expect(a.Attempt().RunAttempt).To(Equal(gatewaytest.RunAttempt))
	closeCtx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e.g.Expect(a.Close(closeCtx)).To(Succeed())

	other := newEnv(t, func(ra *v1.RunAttempt) { ra.Spec.PodUID = "pod-uid-0" })
	a = other.newAgent(nil)
	_, err := a.Start(context.Background())
	other.g.Expect(err).To(MatchError(ContainSubstring("belongs to pod UID pod-uid-0")))
	var ge *agent.GatewayError
	other.g.Expect(errors.As(err, &ge)).To(BeTrue())
	other.g.Expect(ge.Code).To(Equal(gatewayapi.CodeNotAnAttempt))
	other.g.Expect(other.Writes.Load()).To(BeZero())
}

// The SDK reads where the gateway is from the pod's environment (or flags),
// refuses a config without a gateway or a token, re-reads its token file on
// every request, and trusts the gateway CA it is given.
func TestConfig(t *testing.T) {
	g := NewWithT(t)
	t.Setenv(gatewayapi.EnvGatewayURL, "https://gw.agentrun-system.svc:8443")
	t.Setenv(gatewayapi.EnvTokenFile, "/var/run/secrets/agentrun/token")
	t.Setenv(gatewayapi.EnvCAFile, "/var/run/secrets/agentrun/ca.crt")
	cfg := agent.ConfigFromEnv()
	g.Expect(cfg.GatewayURL).To(Equal("https://gw.agentrun-system.svc:8443"))
	g.Expect(cfg.TokenFile).To(Equal("/var/run/secrets/agentrun/token"))
	g.Expect(cfg.CAFile).To(Equal("/var/run/secrets/agentrun/ca.crt"))
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	cfg.BindFlags(fs)
	g.Expect(fs.Parse([]string{"--gateway-url=https://other:1", "--token-file=/t"})).To(Succeed())
	g.Expect(cfg.GatewayURL).To(Equal("https://other:1"))
	g.Expect(cfg.TokenFile).To(Equal("/t"))
	g.Expect(cfg.CAFile).To(Equal("/var/run/secrets/agentrun/ca.crt"), "the environment is the default")

	_, err := agent.New(agent.Config{})
	g.Expect(err).To(MatchError(ContainSubstring(gatewayapi.EnvGatewayURL)))
	g.Expect(err).To(MatchError(ContainSubstring(gatewayapi.EnvTokenFile)))
	g.Expect(err).To(MatchError(ContainSubstring("--gateway-url")))
	dir := t.TempDir()
	_, err = agent.New(agent.Config{GatewayURL: "https://gw", Token: "t", CAFile: filepath.Join(dir, "missing.crt")})
	g.Expect(err).To(MatchError(ContainSubstring("missing.crt")))
	junk := filepath.Join(dir, "junk.crt")
	g.Expect(os.WriteFile(junk, []byte("not a certificate"), 0o600)).To(Succeed())
	_, err = agent.New(agent.Config{GatewayURL: "https://gw", Token: "t", CAFile: junk})
	g.Expect(err).To(MatchError(ContainSubstring("holds no PEM certificate")))

	// A gateway nobody answers at: Start says so when its context ends.
	down := httptest.NewServer(nil)
	down.Close()
	a, err := agent.New(agent.Config{GatewayURL: down.URL, Token: "t"})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = a.Start(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("read the attempt from the gateway at " + down.URL)))

	// The token file is re-read on every request (the kubelet rotates it).
	e := newEnv(t, nil)
	tokenFile := filepath.Join(dir, "token")
	g.Expect(os.WriteFile(tokenFile, []byte(gatewaytest.Token+"\n"), 0o600)).To(Succeed())
	c := e.AgentConfig()
	c.Token, c.TokenFile = "", tokenFile
	a, err = agent.New(c)
	g.Expect(err).NotTo(HaveOccurred())
	runCtx := e.start(a)
	_, err = a.Step(runCtx, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(tokenFile, []byte("revoked"), 0o600)).To(Succeed())
	_, err = a.Step(runCtx, false)
	var ge *agent.GatewayError
	g.Expect(errors.As(err, &ge)).To(BeTrue())
	g.Expect(ge.Status).To(Equal(401))
	g.Expect(ge.Code).To(Equal(gatewayapi.CodeInvalidToken))
	g.Expect(os.WriteFile(tokenFile, []byte(gatewaytest.Token), 0o600)).To(Succeed())
	_, err = a.Step(runCtx, false)
	g.Expect(err).NotTo(HaveOccurred())

	// Over TLS, with the gateway's CA.
	tlsSrv := httptest.NewUnstartedServer(e.Gateway.Handler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's handshake error
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	ca := filepath.Join(dir, "ca.crt")
	g.Expect(os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600)).To(Succeed())
	a, err = agent.New(agent.Config{GatewayURL: tlsSrv.URL, Token: gatewaytest.Token, CAFile: ca})
	g.Expect(err).NotTo(HaveOccurred())
	tlsCtx, tlsCancel := context.WithTimeout(context.Background(), wait)
	defer tlsCancel()
	_, err = a.Start(tlsCtx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a.Close(tlsCtx)).To(Succeed())
	a, err = agent.New(agent.Config{GatewayURL: tlsSrv.URL, Token: gatewaytest.Token})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = a.Start(tlsCtx)
	g.Expect(err).To(MatchError(ContainSubstring("certificate")), "without the CA the gateway is not trusted")
}

// Fingerprints are canonical: key order and Go representation do not
// matter; the context and the tool do. Idempotency keys are stable across
// attempts of a run.
func TestFingerprintCanonical(t *testing.T) {
	g := NewWithT(t)
	type args struct {
		URL   string `json:"url"`
		Depth int    `json:"depth"`
	}
	a, err := gatewayapi.Fingerprint("http.get", args{URL: "https://x.org/?a=1&b=<2>", Depth: 2}, "")
	g.Expect(err).NotTo(HaveOccurred())
	b, _ := gatewayapi.Fingerprint("http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "")
	c, _ := gatewayapi.Fingerprint("http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "section:intro")
	d, _ := gatewayapi.Fingerprint("http.post", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"}, "")
	g.Expect(a).To(Equal(b), "key order and Go representation do not matter")
	g.Expect(a).To(MatchRegexp("^[0-9a-f]{32}$"))
	g.Expect(c).NotTo(Equal(a), "context is part of the fingerprint")
	g.Expect(d).NotTo(Equal(a), "so is the tool")
	canon, _ := gatewayapi.CanonicalJSON(map[string]any{"b": []any{2, 1}, "a": map[string]any{"z": 1, "y": "&"}})
	g.Expect(string(canon)).To(Equal(`{"a":{"y":"&","z":1},"b":[2,1]}`))
	g.Expect(gatewayapi.IdempotencyKey("survey", a)).To(Equal(gatewayapi.IdempotencyKey("survey", b)), "stable across attempts")
	g.Expect(gatewayapi.IdempotencyKey("other", a)).NotTo(Equal(gatewayapi.IdempotencyKey("survey", a)))
	idA, _ := gatewayapi.ActionIDOf("http.get", map[string]any{"depth": 2, "url": "https://x.org/?a=1&b=<2>"})
	g.Expect(idA).To(MatchRegexp(`^http\.get-[0-9a-f]{32}$`))
	_, err = gatewayapi.Fingerprint("x", func() {}, "")
	g.Expect(err).To(HaveOccurred())
}

// Escalate says a new attempt cannot fix the fault; EscalateRetryable says
// it may. Both are durable before they return.
func TestEscalations(t *testing.T) {
	e := newEnvWith(t, gatewaytest.Options{FlushInterval: time.Hour})
	a := e.newAgent(nil)
	ctx := e.start(a)
	e.g.Expect(a.Escalate(ctx, v1.FaultScopeProvider, "InvalidAPIKey", "401")).To(Succeed())
	e.g.Expect(a.EscalateRetryable(ctx, v1.FaultScopeAgent, "StateCorrupted", "index unreadable")).To(Succeed())
	faults := e.status().Faults
	e.g.Expect(faults).To(ContainElement(And(HaveField("Kind", "InvalidAPIKey"), HaveField("Escalated", BeTrue()), HaveField("Retryable", BeFalse()))))
	e.g.Expect(faults).To(ContainElement(And(HaveField("Kind", "StateCorrupted"), HaveField("Escalated", BeTrue()), HaveField("Retryable", BeTrue()))))
}
