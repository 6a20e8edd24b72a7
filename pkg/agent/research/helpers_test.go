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

package research

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

const (
	ns      = "team"
	runName = "survey"
	wait    = 10 * time.Second
	poll    = 5 * time.Millisecond
)

// world is a fake API server with one RunAttempt (as the operator creates
// it), a web server for http.get, and a user who answers approvals.
type world struct {
	t       *testing.T
	g       Gomega
	c       client.WithWatch
	key     types.NamespacedName
	web     *httptest.Server
	writes  atomic.Int64
	decide  func(actionID string) (v1.ApprovalDecision, bool)
	approve sync.Once
}

func attemptObject(attempt int32) *v1.RunAttempt {
	return &v1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("%s-%d", runName, attempt), Generation: 1,
			Labels: map[string]string{v1.LabelRun: runName, v1.LabelAttempt: fmt.Sprint(attempt)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1.GroupVersion.String(), Kind: "ResearchRun", Name: runName, UID: "run-uid",
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: v1.RunAttemptSpec{
			RunName: runName, Attempt: attempt, Goal: "compare vector databases",
			RunPhase: v1.PhaseRunning,
			Grant:    v1.Grant{ModelRequests: 20, ToolCalls: 30},
			Mode:     v1.ModeAuto,
			Policy: v1.PolicySnapshot{
				Name: "default",
				ResolvedChain: []v1.ResolvedInterceptor{
					{Name: "auth", Class: v1.ClassSecurity, Role: v1.RoleAuthentication, Phase: v1.InterceptorPre, Priority: 10, OnError: v1.PostureDeny, Veto: true},
					{Name: "rate_limit", Class: v1.ClassResource, Role: v1.RoleIdentityConsumer, Phase: v1.InterceptorPre, Priority: 20, OnError: v1.PostureDeny, Veto: true},
					{Name: "redact", Class: v1.ClassSecurity, Role: v1.RoleRedaction, Phase: v1.InterceptorPost, Priority: 50, OnError: v1.PostureDeny},
					{Name: "audit", Class: v1.ClassObservability, Role: v1.RoleAudit, Phase: v1.InterceptorPost, Priority: 90, OnError: v1.PostureAllow, Buffered: true},
				},
				Tools: []v1.Tool{
					{Name: ToolHTTPGet, Risk: v1.RiskLow, Effect: v1.EffectNone},
					{Name: ToolNotesWrite, Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
					{Name: ToolReportPublish, Risk: v1.RiskHigh, Effect: v1.EffectExternal},
				},
				AutoApprove: []string{ToolNotesWrite},
			},
			HeartbeatInterval: &metav1.Duration{Duration: 10 * time.Second},
		},
	}
}

func newWorld(t *testing.T, ra *v1.RunAttempt, objs ...client.Object) *world {
	t.Helper()
	w := &world{t: t, g: NewWithT(t), key: client.ObjectKeyFromObject(ra)}
	w.decide = func(string) (v1.ApprovalDecision, bool) { return v1.DecisionApprove, true }
	w.c = fake.NewClientBuilder().
		WithScheme(agent.Scheme()).
		WithObjects(append([]client.Object{ra}, objs...)...).
		WithStatusSubresource(&v1.RunAttempt{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if err == nil {
					w.writes.Add(1)
				}
				return err
			},
		}).
		Build()
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
// ResearchRun would (the operator copies approvals onto the attempt).
func (w *world) user(ctx context.Context) {
	w.approve.Do(func() {
		watcher, err := w.c.Watch(ctx, &v1.RunAttemptList{}, client.InNamespace(ns))
		w.g.Expect(err).NotTo(HaveOccurred())
		go func() {
			defer watcher.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-watcher.ResultChan():
					if !ok {
						return
					}
					ra, isRA := ev.Object.(*v1.RunAttempt)
					if !isRA || ev.Type == watch.Deleted || ra.Name != w.key.Name || len(ra.Status.AwaitingApproval) == 0 {
						continue
					}
					_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
						cur := &v1.RunAttempt{}
						if err := w.c.Get(ctx, w.key, cur); err != nil {
							return err
						}
						changed := false
						for _, id := range ra.Status.AwaitingApproval {
							answered := false
							for _, a := range cur.Spec.Approvals {
								answered = answered || a.ActionID == id
							}
							if d, ok := w.decide(id); ok && !answered {
								cur.Spec.Approvals = append(cur.Spec.Approvals, v1.Approval{ActionID: id, Decision: d, Approver: "alice"})
								changed = true
							}
						}
						if !changed {
							return nil
						}
						return w.c.Update(ctx, cur)
					})
				}
			}
		}()
	})
}

func (w *world) config(script string) Config {
	w.t.Helper()
	cfg := Config{
		Agent: agent.Config{
			Client: w.c, Namespace: ns, RunAttempt: w.key.Name, FlushInterval: 10 * time.Millisecond,
		},
		Log:           testr.NewWithOptions(w.t, testr.Options{Verbosity: 1}),
		HTTPAllowlist: []string{hostOf(w.web.URL)},
		RetryBackoff:  time.Millisecond,
		AuditWriter:   &strings.Builder{},
		Exit:          func(int) { w.t.Error("unexpected process exit") },
	}
	if script != "" {
		s, err := ParseScript([]byte(strings.ReplaceAll(script, "WEB", w.web.URL)))
		w.g.Expect(err).NotTo(HaveOccurred())
		cfg.Script = s
	}
	return cfg
}

// run runs the agent with the user answering approvals; it returns Run's error.
func (w *world) run(cfg Config) error {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.user(ctx)
	return Run(ctx, cfg)
}

// start runs the agent in the background; the returned channel gets Run's error.
func (w *world) start(ctx context.Context, cfg Config) <-chan error {
	w.user(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	return done
}

func (w *world) attempt() *v1.RunAttempt {
	w.t.Helper()
	ra := &v1.RunAttempt{}
	w.g.Expect(w.c.Get(context.Background(), w.key, ra)).To(Succeed())
	return ra
}

func (w *world) updateSpec(mutate func(*v1.RunAttemptSpec)) {
	w.t.Helper()
	w.g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ra := &v1.RunAttempt{}
		if err := w.c.Get(context.Background(), w.key, ra); err != nil {
			return err
		}
		mutate(&ra.Spec)
		return w.c.Update(context.Background(), ra)
	})).To(Succeed())
}

func (w *world) report() *corev1.ConfigMap {
	w.t.Helper()
	cm := &corev1.ConfigMap{}
	w.g.Expect(w.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: runName + "-report"}, cm)).To(Succeed())
	return cm
}

func (w *world) index() Index {
	w.t.Helper()
	var idx Index
	w.g.Expect(json.Unmarshal([]byte(w.report().Data[IndexKey]), &idx)).To(Succeed())
	return idx
}

func hostOf(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func fault(s v1.RunAttemptStatus, scope v1.FaultScope, kind string) (v1.Fault, bool) {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f, true
		}
	}
	return v1.Fault{}, false
}
