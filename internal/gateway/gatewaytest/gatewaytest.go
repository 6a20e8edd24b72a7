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

// Package gatewaytest runs a real agentrun-gateway in the test process, for
// the SDK's, the reference agent's and the gateway's own tests: the gateway's
// HTTP server on loopback, in front of a fake API server (controller-runtime's
// fake client, with status writes counted and, on demand, refused) holding
// one RunAttempt, a static token for the attempt's pod, and the scripted
// upstream as the model provider.
package gatewaytest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// Names of the test attempt.
const (
	Namespace  = "team"
	Run        = "survey"
	RunAttempt = "survey-1"
	// RunUID is the run's UID (the attempt's owner reference).
	RunUID = "run-uid"
	PodUID = "pod-uid-1"
	// Token is the attempt pod's bearer token.
	Token = "token-of-survey-1"
	// OtherPodToken is the token of an earlier pod of the same name (another
	// UID): valid, but not the pod the RunAttempt records.
	OtherPodToken = "token-of-an-earlier-survey-1-pod"
	// StrangerToken is the token of a pod that is no attempt's.
	StrangerToken = "token-of-a-stranger-pod"
	// UnboundToken is a valid service-account token bound to no pod.
	UnboundToken = "token-of-no-pod"
	// Model is the model the test policy serves.
	Model = "scripted"
	// DegradedModel is the model served under a Degrade directive.
	DegradedModel = "scripted-small"
)

// Env is a running gateway in front of a fake API server.
type Env struct {
	T        testing.TB
	Client   client.WithWatch
	Gateway  *gateway.Gateway
	Server   *httptest.Server
	Upstream *upstream.Server
	Registry *prometheus.Registry
	Key      types.NamespacedName

	// Writes counts successful status writes; Conflicts injects that many
	// conflicts; Down makes status writes fail as if the API server were
	// unreachable.
	Writes    atomic.Int64
	Conflicts atomic.Int64
	Down      atomic.Bool

	opts Options
	// dead cuts the current gateway process off the API server (Crash).
	dead *atomic.Bool
}

// Options adjusts an Env.
type Options struct {
	// Mutate changes the RunAttempt before the gateway starts.
	Mutate func(*v1alpha1.RunAttempt)
	// FlushInterval of the gateway (default 20ms).
	FlushInterval time.Duration
	// Objects are added to the fake API server too (Secrets, ConfigMaps).
	Objects []client.Object
	// PodWait of the gateway (default 1s).
	PodWait time.Duration
	// Log receives the gateway's logs (default: discarded).
	Log logr.Logger
	// DurableAdmission makes every admission durable before dispatch.
	DurableAdmission bool
	// Interceptors replace the gateway's built-in interceptors by name.
	Interceptors chain.Registry
	// AuditLog receives the audit interceptor's lines (default io.Discard).
	AuditLog io.Writer
	// Events receives the gateway's run-stream events (default none).
	Events gateway.Emitter
	// Liveness is the gateway's Lease (default none: it writes
	// heartbeatTime). Each start (Restart) is a new process, with a new
	// holder identity unless Identity is set.
	Liveness gateway.Liveness
	// Tune changes the gateway's options before it starts (its limits).
	Tune func(*gateway.Options)
	// StaleCache makes the gateway's cache (Client) answer every read of
	// the RunAttempt with what it first read, as an informer in its relist
	// back-off after an API server restart does; APIReader stays live.
	StaleCache bool
}

// Attempt is the test RunAttempt: Running, a grant of 10 model requests and
// 10 tool calls, mode Auto, the research agent's tools, and two models.
func Attempt() *v1alpha1.RunAttempt {
	return &v1alpha1.RunAttempt{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: RunAttempt, Generation: 1, ResourceVersion: "",
			Labels: map[string]string{v1alpha1.LabelRun: Run, v1alpha1.LabelAttempt: "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "ResearchRun", Name: Run, UID: RunUID, Controller: new(true),
			}},
		},
		Spec: v1alpha1.RunAttemptSpec{
			RunName: Run, Attempt: 1, Goal: "survey the field", PodName: RunAttempt, PodUID: PodUID,
			RunPhase: v1alpha1.PhaseRunning,
			Grant:    v1alpha1.Grant{ModelRequests: 10, ToolCalls: 10},
			Mode:     v1alpha1.ModeAuto,
			Policy: v1alpha1.PolicySnapshot{
				Name: "p",
				Tools: []v1alpha1.Tool{
					{Name: "http.get", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectNone},
					{Name: "notes.write", Risk: v1alpha1.RiskLow, Effect: v1alpha1.EffectWrite, Idempotent: true},
					{Name: "report.publish", Risk: v1alpha1.RiskHigh, Effect: v1alpha1.EffectExternal},
				},
				AutoApprove: []string{"notes.write"},
			},
			HeartbeatInterval: &metav1.Duration{Duration: 10 * time.Second},
		},
	}
}

// Scheme knows the built-in types and agentrun.dev.
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

// Start starts an Env; it is stopped when the test ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	ra := Attempt()
	e := &Env{T: t, Upstream: &upstream.Server{}, Key: types.NamespacedName{Namespace: Namespace, Name: RunAttempt}}
	up := httptest.NewServer(e.Upstream)
	t.Cleanup(up.Close)
	ra.Spec.Policy.Models = []v1alpha1.Model{
		{Name: Model, BaseURL: up.URL + "/v1", DegradedModel: DegradedModel},
		{Name: DegradedModel, BaseURL: up.URL + "/v1", UpstreamModel: "scripted-small-v2"},
	}
	if o.Mutate != nil {
		o.Mutate(ra)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 20 * time.Millisecond
	}
	if o.PodWait <= 0 {
		o.PodWait = time.Second
	}
	if o.AuditLog == nil {
		o.AuditLog = io.Discard
	}
	e.opts = o
	e.Client = fake.NewClientBuilder().
		WithScheme(Scheme()).
		WithObjects(append([]client.Object{ra}, o.Objects...)...).
		WithStatusSubresource(&v1alpha1.RunAttempt{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if sub == "status" {
					if e.Down.Load() {
						return errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
					}
					if e.Conflicts.Load() > 0 {
						e.Conflicts.Add(-1)
						return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "runattempts"},
							obj.GetName(), errors.New("injected conflict"))
					}
				}
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if err == nil && sub == "status" {
					e.Writes.Add(1)
				}
				return err
			},
		}).
		Build()
	e.startGateway(o.FlushInterval)
	return e
}

// errCrashed is what a crashed gateway process's writes meet: it writes
// nothing more.
var errCrashed = errors.New("gatewaytest: this gateway process crashed")

// tokens are the identities the API server vouches for.
func tokens() gateway.StaticTokens {
	sa := "system:serviceaccount:" + Namespace + ":agentrun-runner"
	return gateway.StaticTokens{
		Token:         {Username: sa, Namespace: Namespace, PodName: RunAttempt, PodUID: PodUID},
		OtherPodToken: {Username: sa, Namespace: Namespace, PodName: RunAttempt, PodUID: "pod-uid-0"},
		StrangerToken: {Username: sa, Namespace: Namespace, PodName: "stranger", PodUID: "pod-uid-stranger"},
		UnboundToken:  {Username: "system:serviceaccount:" + Namespace + ":default", Namespace: Namespace},
	}
}

func (e *Env) startGateway(flush time.Duration) {
	// Each gateway process reaches the API server through its own client,
	// which Crash cuts off.
	dead := &atomic.Bool{}
	refuse := func() error {
		if dead.Load() {
			return errCrashed
		}
		return nil
	}
	var frozen atomic.Pointer[v1alpha1.RunAttempt]
	c := interceptor.NewClient(e.Client, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			ra, ok := obj.(*v1alpha1.RunAttempt)
			if !e.opts.StaleCache || !ok {
				return c.Get(ctx, key, obj, opts...)
			}
			if f := frozen.Load(); f != nil {
				f.DeepCopyInto(ra)
				return nil
			}
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			frozen.Store(ra.DeepCopy())
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := refuse(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := refuse(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := refuse(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := refuse(); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := refuse(); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	// A new process has new metrics.
	e.Registry = prometheus.NewRegistry()
	gopts := gateway.Options{
		Client:        c,
		APIReader:     e.Client,
		Authenticator: tokens(),
		FlushInterval: flush,
		PollInterval:  20 * time.Millisecond,
		PodWait:       e.opts.PodWait,
		Registry:      e.Registry,
		Log:           e.opts.Log,

		DurableAdmission: e.opts.DurableAdmission,
		Interceptors:     e.opts.Interceptors,
		AuditLog:         e.opts.AuditLog,
		Events:           e.opts.Events,
		Liveness:         e.opts.Liveness,
	}
	if e.opts.Tune != nil {
		e.opts.Tune(&gopts)
	}
	g, err := gateway.New(gopts)
	if err != nil {
		e.T.Fatal(err)
	}
	e.Gateway, e.dead = g, dead
	e.Server = httptest.NewServer(g.Handler())
	e.T.Cleanup(e.stopGateway)
}

func (e *Env) stopGateway() {
	if e.Server == nil {
		return
	}
	e.Server.CloseClientConnections()
	e.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.Gateway.Shutdown(ctx)
	e.Server = nil
}

// Crash stops the gateway as a crash would: its connections are cut, it
// writes nothing more (coalesced facts not yet written are lost) and its
// background work ends. Restart starts a new one (on a new URL).
func (e *Env) Crash() {
	e.dead.Store(true)
	srv, g := e.Server, e.Gateway
	e.Server = nil
	srv.CloseClientConnections()
	srv.Close()
	// Stop the dead process's goroutines; every write it tries fails.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.Shutdown(ctx)
}

// Restart starts a new gateway process in front of the same API server,
// with the Env's flush interval.
func (e *Env) Restart() { e.startGateway(e.opts.FlushInterval) }

// RestartWithFlush starts a new gateway process with another flush interval.
func (e *Env) RestartWithFlush(flush time.Duration) { e.startGateway(flush) }

// URL is the gateway's base URL.
func (e *Env) URL() string { return e.Server.URL }

// AgentConfig is an SDK config for the attempt's pod.
func (e *Env) AgentConfig() agent.Config {
	return agent.Config{GatewayURL: e.URL(), Token: Token, PollInterval: 20 * time.Millisecond}
}

// Get returns the RunAttempt as the API server holds it.
func (e *Env) Get() *v1alpha1.RunAttempt {
	e.T.Helper()
	ra := &v1alpha1.RunAttempt{}
	if err := e.Client.Get(context.Background(), e.Key, ra); err != nil {
		e.T.Fatal(err)
	}
	return ra
}

// Status returns the RunAttempt's status as the API server holds it.
func (e *Env) Status() v1alpha1.RunAttemptStatus { return e.Get().Status }

// UpdateSpec changes the RunAttempt's spec as the operator would, and tells
// the gateway (as its informer would).
func (e *Env) UpdateSpec(mutate func(*v1alpha1.RunAttemptSpec)) {
	e.T.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ra := &v1alpha1.RunAttempt{}
		if err := e.Client.Get(context.Background(), e.Key, ra); err != nil {
			return err
		}
		mutate(&ra.Spec)
		ra.Generation++
		if err := e.Client.Update(context.Background(), ra); err != nil {
			return err
		}
		e.Gateway.Observe(ra)
		return nil
	})
	if err != nil {
		e.T.Fatal(err)
	}
}

// Metric returns the sum, over the series of the gateway's metric name whose
// labels include labels, of the counter values (or histogram sample counts).
func (e *Env) Metric(name string, labels map[string]string) float64 {
	e.T.Helper()
	families, err := e.Registry.Gather()
	if err != nil {
		e.T.Fatal(err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// Do sends an authenticated request to the gateway (token "" for none).
func (e *Env) Do(method, path, token string, body []byte) *http.Response {
	e.T.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL()+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	return resp
}

// Decision is a person's decision on actionID as the admission webhook
// admits it: stamped with the time of its admission (now). The gateway
// honours a decision only within the window of the request it answers.
func Decision(actionID string, d v1alpha1.ApprovalDecision) v1alpha1.Approval {
	return v1alpha1.Approval{ActionID: actionID, Decision: d, Approver: "alice", Time: &metav1.Time{Time: time.Now()}}
}

// ApproveWhenAsked approves each call of actionIDs, as a person would, once
// it waits (status.awaitingApproval) with no unused approval of its window,
// until the test ends.
func (e *Env) ApproveWhenAsked(actionIDs ...string) {
	e.approveWhenAsked(func(a v1alpha1.ApprovalRequest) bool { return slices.Contains(actionIDs, a.ActionID) })
}

// ApproveToolWhenAsked approves every call of the tools that waits, as
// ApproveWhenAsked does for named calls.
func (e *Env) ApproveToolWhenAsked(tools ...string) {
	e.approveWhenAsked(func(a v1alpha1.ApprovalRequest) bool { return slices.Contains(tools, a.Tool) })
}

func (e *Env) approveWhenAsked(match func(v1alpha1.ApprovalRequest) bool) {
	ctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(cancel)
	g := e.Gateway
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				ra := &v1alpha1.RunAttempt{}
				if err := e.Client.Get(ctx, e.Key, ra); err != nil {
					return err
				}
				changed := false
				for _, a := range ra.Status.AwaitingApproval {
					if match(a) && !Answered(ra, a) {
						ra.Spec.Approvals = append(ra.Spec.Approvals, Decision(a.ActionID, v1alpha1.DecisionApprove))
						changed = true
					}
				}
				if !changed {
					return nil
				}
				ra.Generation++
				if err := e.Client.Update(ctx, ra); err != nil {
					return err
				}
				g.Observe(ra)
				return nil
			})
		}
	}()
}

// Answered reports whether a decision not yet used is stamped within the
// window of request a.
func Answered(ra *v1alpha1.RunAttempt, a v1alpha1.ApprovalRequest) bool {
	for i, ap := range ra.Spec.Approvals {
		if ap.ActionID == a.ActionID && ap.Time != nil && a.RequestedAt != nil &&
			!ap.Time.Before(&metav1.Time{Time: a.RequestedAt.Truncate(time.Second)}) &&
			!slices.Contains(ra.Status.UsedApprovals, int32(i)) {
			return true
		}
	}
	return false
}
