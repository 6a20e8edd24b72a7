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
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

const (
	testNS      = "team"
	testRun     = "survey"
	testAttempt = "survey-1"
	wait        = 5 * time.Second
	poll        = 5 * time.Millisecond
)

// t0 is a whole second, so heartbeat stamps survive serialisation exactly.
var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// env is a fake API server holding one RunAttempt, with status writes
// counted and, on demand, refused with conflicts or errors.
type env struct {
	t     *testing.T
	g     Gomega
	c     client.WithWatch
	clock *clocktesting.FakeClock
	key   types.NamespacedName

	writes    atomic.Int64 // successful status writes
	conflicts atomic.Int64 // conflicts still to inject
	injected  atomic.Int64 // conflicts injected
	down      atomic.Bool  // status writes fail as if the API server were unreachable
}

func baseAttempt() *v1.RunAttempt {
	return &v1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: testAttempt, Generation: 1,
			Labels: map[string]string{v1.LabelRun: testRun, v1.LabelAttempt: "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1.GroupVersion.String(), Kind: "ResearchRun", Name: testRun, UID: "run-uid", Controller: new(true),
			}},
		},
		Spec: v1.RunAttemptSpec{
			RunName: testRun, Attempt: 1, Goal: "survey the field",
			RunPhase: v1.PhaseRunning,
			Grant:    v1.Grant{ModelRequests: 10, ToolCalls: 10},
			Mode:     v1.ModeAuto,
			Policy: v1.PolicySnapshot{
				Name: "p",
				Tools: []v1.Tool{
					{Name: "http.get", Risk: v1.RiskLow, Effect: v1.EffectNone},
					{Name: "notes.write", Risk: v1.RiskLow, Effect: v1.EffectWrite, Idempotent: true},
					{Name: "report.publish", Risk: v1.RiskHigh, Effect: v1.EffectExternal},
				},
				AutoApprove: []string{"notes.write"},
			},
			HeartbeatInterval: &metav1.Duration{Duration: 10 * time.Second},
		},
	}
}

func newEnv(t *testing.T, mutate func(*v1.RunAttempt)) *env {
	t.Helper()
	ra := baseAttempt()
	if mutate != nil {
		mutate(ra)
	}
	e := &env{t: t, g: NewWithT(t), clock: clocktesting.NewFakeClock(t0),
		key: types.NamespacedName{Namespace: testNS, Name: testAttempt}}
	e.c = fake.NewClientBuilder().
		WithScheme(agent.Scheme()).
		WithObjects(ra).
		WithStatusSubresource(&v1.RunAttempt{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if sub == "status" {
					if e.down.Load() {
						return errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
					}
					if e.conflicts.Load() > 0 {
						e.conflicts.Add(-1)
						e.injected.Add(1)
						return apierrors.NewConflict(schema.GroupResource{Group: v1.GroupVersion.Group, Resource: "runattempts"},
							obj.GetName(), errors.New("injected conflict"))
					}
				}
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if err == nil && sub == "status" {
					e.writes.Add(1)
				}
				return err
			},
		}).
		Build()
	return e
}

// newAgent returns an agent on the env's RunAttempt; setup registers
// interceptors and tools before Start.
func (e *env) newAgent(setup func(*agent.Agent)) *agent.Agent {
	e.t.Helper()
	a, err := agent.New(agent.Config{
		Client: e.c, Clock: e.clock, Namespace: testNS, RunAttempt: testAttempt,
	})
	e.g.Expect(err).NotTo(HaveOccurred())
	if setup != nil {
		setup(a)
	}
	return a
}

// start starts a (closing it when the test ends) and returns its context.
func (e *env) start(a *agent.Agent) context.Context {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runCtx, err := a.Start(ctx)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.t.Cleanup(func() {
		closeCtx, done := context.WithTimeout(context.Background(), wait)
		defer done()
		_ = a.Close(closeCtx)
		cancel()
	})
	return runCtx
}

func (e *env) get() *v1.RunAttempt {
	e.t.Helper()
	ra := &v1.RunAttempt{}
	e.g.Expect(e.c.Get(context.Background(), e.key, ra)).To(Succeed())
	return ra
}

func (e *env) status() v1.RunAttemptStatus { return e.get().Status }

// updateSpec changes the RunAttempt's spec as the operator would.
func (e *env) updateSpec(mutate func(*v1.RunAttemptSpec)) {
	e.t.Helper()
	e.g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ra := &v1.RunAttempt{}
		if err := e.c.Get(context.Background(), e.key, ra); err != nil {
			return err
		}
		mutate(&ra.Spec)
		ra.Generation++
		return e.c.Update(context.Background(), ra)
	})).To(Succeed())
}

// flush writes the agent's facts now.
func (e *env) flush(a *agent.Agent) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	e.g.Expect(a.Flush(ctx)).To(Succeed())
}

func (e *env) tools(a *agent.Agent, ran *sync.Map) {
	e.t.Helper()
	for _, t := range []agent.Tool{
		{Name: "http.get", Run: func(_ context.Context, c *agent.Call) (string, error) {
			if ran != nil {
				ran.Store(c.Name, true)
			}
			return "page " + c.StringArg("url"), nil
		}},
		{Name: "notes.write", Run: func(_ context.Context, c *agent.Call) (string, error) {
			if ran != nil {
				ran.Store(c.Name, true)
			}
			return "noted", nil
		}},
		{Name: "report.publish", Output: true, Run: func(_ context.Context, c *agent.Call) (string, error) {
			if ran != nil {
				ran.Store(c.Name, true)
			}
			return "published " + c.StringArg("section"), nil
		}},
	} {
		e.g.Expect(a.RegisterTool(t)).To(Succeed())
	}
}

func faultCount(s v1.RunAttemptStatus, scope v1.FaultScope, kind string) int64 {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f.Count
		}
	}
	return 0
}

func findFault(s v1.RunAttemptStatus, scope v1.FaultScope, kind string) (v1.Fault, bool) {
	for _, f := range s.Faults {
		if f.Scope == scope && f.Kind == kind {
			return f, true
		}
	}
	return v1.Fault{}, false
}

// histogramCount returns the sample count of
// agentrun_agent_interceptor_seconds{interceptor, outcome}.
func histogramCount(t *testing.T, a *agent.Agent, name, outcome string) uint64 {
	t.Helper()
	families, err := a.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "agentrun_agent_interceptor_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m)["interceptor"] == name && labels(m)["outcome"] == outcome {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
