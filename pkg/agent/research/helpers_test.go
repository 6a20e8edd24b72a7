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

package research_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/research/scripted"
	"github.com/agentrun-dev/agentrun/pkg/agent/research"
)

const (
	runName = gatewaytest.Run
	wait    = 10 * time.Second
	poll    = 5 * time.Millisecond
)

// world is a real gateway (in this process) in front of a fake API server
// with one RunAttempt as the operator creates it for the research agent, a
// web server for http.get, and a user who answers approvals.
type world struct {
	*gatewaytest.Env
	t       *testing.T
	g       Gomega
	web     *httptest.Server
	decide  func(actionID string) (v1alpha1.ApprovalDecision, bool)
	approve sync.Once
}

// researchAttempt makes the test attempt the research agent's: the sample
// policy's chain and tools, a grant of 20 model requests and 30 tool calls,
// attempt number attempt.
func researchAttempt(ra *v1alpha1.RunAttempt, attempt int32) {
	ra.Labels[v1alpha1.LabelAttempt] = fmt.Sprint(attempt)
	ra.Spec.Attempt = attempt
	ra.Spec.Goal = "compare vector databases"
	ra.Spec.Grant = v1alpha1.Grant{ModelRequests: 20, ToolCalls: 30}
	ra.Spec.Policy.Name = "default"
	ra.Spec.Policy.ResolvedChain = []v1alpha1.ResolvedInterceptor{
		{Name: "auth", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleAuthentication, Phase: v1alpha1.InterceptorPre, Priority: 10, OnError: v1alpha1.PostureDeny, Veto: true},
		{Name: "rate_limit", Class: v1alpha1.ClassResource, Role: v1alpha1.RoleIdentityConsumer, Phase: v1alpha1.InterceptorPre, Priority: 20, OnError: v1alpha1.PostureDeny, Veto: true},
		{Name: "redact", Class: v1alpha1.ClassSecurity, Role: v1alpha1.RoleRedaction, Phase: v1alpha1.InterceptorPost, Priority: 50, OnError: v1alpha1.PostureDeny},
		{Name: "audit", Class: v1alpha1.ClassObservability, Role: v1alpha1.RoleAudit, Phase: v1alpha1.InterceptorPost, Priority: 90, OnError: v1alpha1.PostureAllow, Buffered: true},
	}
	ra.Spec.Policy.Tools = []v1alpha1.Tool{
		{Name: research.ToolHTTPGet, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
		{Name: research.ToolNotesWrite, Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite, Idempotent: true},
		{Name: research.ToolReportPublish, Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
	}
	ra.Spec.Policy.AutoApprove = []string{research.ToolNotesWrite}
}

// newWorld starts a world whose attempt is number 1, changed by mutate.
func newWorld(t *testing.T, mutate func(*v1alpha1.RunAttempt), objs ...client.Object) *world {
	t.Helper()
	return newWorldWith(t, gatewaytest.Options{Mutate: mutate, Objects: objs})
}

func newWorldWith(t *testing.T, o gatewaytest.Options) *world {
	t.Helper()
	mutate := o.Mutate
	o.Mutate = func(ra *v1alpha1.RunAttempt) {
		researchAttempt(ra, 1)
		if mutate != nil {
			mutate(ra)
		}
	}
	w := &world{Env: gatewaytest.Start(t, o), t: t, g: NewWithT(t)}
	w.decide = func(string) (v1alpha1.ApprovalDecision, bool) { return v1alpha1.DecisionApprove, true }
	w.web = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/a":
			_, _ = fmt.Fprint(rw, "alpha replicates with raft")
		case "/b":
			_, _ = fmt.Fprint(rw, "beta replicates asynchronously; token=sk-abcdefghijklmnopqrstuvwxyz")
		default:
			http.NotFound(rw, req)
		}
	}))
	t.Cleanup(w.web.Close)
	return w
}

// user answers every action the agent awaits, as a user approving on the
// ResearchRun would (the operator copies approvals onto the attempt, and
// the gateway's informer sees them).
func (w *world) user(ctx context.Context) {
	w.approve.Do(func() {
		gw := w.Gateway
		go func() {
			tick := time.NewTicker(poll)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					cur := &v1alpha1.RunAttempt{}
					if err := w.Client.Get(ctx, w.Key, cur); err != nil {
						return err
					}
					changed := false
					for _, req := range cur.Status.AwaitingApproval {
						if d, ok := w.decide(req.ActionID); ok && !gatewaytest.Answered(cur, req) {
							cur.Spec.Approvals = append(cur.Spec.Approvals, gatewaytest.Decision(req.ActionID, d))
							changed = true
						}
					}
					if !changed {
						return nil
					}
					if err := w.Client.Update(ctx, cur); err != nil {
						return err
					}
					gw.Observe(cur)
					return nil
				})
			}
		}()
	})
}

// base is the world's config for the research agent, with no provider set.
func (w *world) base() research.Config {
	w.t.Helper()
	return research.Config{
		Agent:         w.AgentConfig(),
		Log:           testr.NewWithOptions(w.t, testr.Options{Verbosity: 1}),
		HTTPAllowlist: []string{hostOf(w.web.URL)},
		RetryBackoff:  time.Millisecond,
		AuditWriter:   &strings.Builder{},
		Exit:          func(int) { w.t.Error("unexpected process exit") },
	}
}

// play is the world's config playing script (WEB is the web server's URL;
// with no script, the harness reads $AGENTRUN_SCRIPT), and its harness.
func (w *world) play(script string) (research.Config, *scripted.Harness) {
	w.t.Helper()
	cfg := w.base()
	h := &scripted.Harness{}
	if script != "" {
		s, err := scripted.Parse([]byte(strings.ReplaceAll(script, "WEB", w.web.URL)))
		w.g.Expect(err).NotTo(HaveOccurred())
		h.Script = s
	}
	h.Configure(&cfg)
	return cfg, h
}

// config is the world's config playing script.
func (w *world) config(script string) research.Config {
	w.t.Helper()
	cfg, _ := w.play(script)
	return cfg
}

// run runs the agent with the user answering approvals; it returns Run's error.
func (w *world) run(cfg research.Config) error {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.user(ctx)
	return research.Run(ctx, cfg)
}

// start runs the agent in the background; the returned channel gets Run's error.
func (w *world) start(ctx context.Context, cfg research.Config) <-chan error {
	w.user(ctx)
	done := make(chan error, 1)
	go func() { done <- research.Run(ctx, cfg) }()
	return done
}

func (w *world) status() v1alpha1.RunAttemptStatus { return w.Status() }

func (w *world) report() *corev1.ConfigMap {
	w.t.Helper()
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: gatewaytest.Namespace, Name: gateway.ReportName(runName)}
	w.g.Expect(w.Client.Get(context.Background(), key, cm)).To(Succeed())
	return cm
}

func (w *world) index() gateway.ReportIndex {
	w.t.Helper()
	var idx gateway.ReportIndex
	w.g.Expect(json.Unmarshal([]byte(w.report().Data[gateway.ReportIndexKey]), &idx)).To(Succeed())
	return idx
}

func hostOf(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func fault(s v1alpha1.RunAttemptStatus, scope v1alpha1.FaultScope, kind string) (v1alpha1.Fault, bool) {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f, true
		}
	}
	return v1alpha1.Fault{}, false
}

// requests is how many agent API and model requests the gateway served
// (the attempt watch, a stream, is counted when it ends: not here).
func (w *world) requests() float64 {
	return w.Metric("agentrun_gateway_request_seconds", nil) - w.Metric("agentrun_gateway_request_seconds", map[string]string{"route": "watch"})
}

// hasFault returns a function reporting whether the status holds (scope,
// kind), for Eventually.
func (w *world) hasFault(scope v1alpha1.FaultScope, kind string) func() bool {
	return func() bool {
		_, ok := fault(w.status(), scope, kind)
		return ok
	}
}
