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

package chain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// Timeouts of Eventually: resends run every few milliseconds in tests.
const (
	eventually = 5 * time.Second
	poll       = 5 * time.Millisecond
)

func entry(name string, class v1alpha1.InterceptorClass, phase v1alpha1.InterceptorPhase,
	onError v1alpha1.Posture) v1alpha1.ResolvedInterceptor {
	return v1alpha1.ResolvedInterceptor{Name: name, Class: class, Phase: phase, OnError: onError}
}

func pre(name string, class v1alpha1.InterceptorClass, onError v1alpha1.Posture, veto bool) v1alpha1.ResolvedInterceptor {
	e := entry(name, class, v1alpha1.InterceptorPre, onError)
	e.Veto = veto
	return e
}

func around(name string, onError v1alpha1.Posture) v1alpha1.ResolvedInterceptor {
	return entry(name, v1alpha1.ClassResource, v1alpha1.InterceptorAround, onError)
}

func post(name string, class v1alpha1.InterceptorClass, onError v1alpha1.Posture, buffered bool) v1alpha1.ResolvedInterceptor {
	e := entry(name, class, v1alpha1.InterceptorPost, onError)
	e.Buffered = buffered
	return e
}

// sampleChain is config/samples/agentrun_v1alpha1_runtimepolicy.yaml's
// resolved chain.
func sampleChain() []v1alpha1.ResolvedInterceptor {
	auth := pre(chain.NameAuth, v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true)
	auth.Priority, auth.Role = 10, v1alpha1.RoleAuthentication
	rl := pre(chain.NameRateLimit, v1alpha1.ClassResource, v1alpha1.PostureDeny, true)
	rl.Priority, rl.Role, rl.RegistrationIndex = 20, v1alpha1.RoleIdentityConsumer, 1
	redact := post(chain.NameRedact, v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false)
	redact.Priority, redact.Role, redact.RegistrationIndex = 50, v1alpha1.RoleRedaction, 2
	audit := post(chain.NameAudit, v1alpha1.ClassObservability, v1alpha1.PostureAllow, true)
	audit.Priority, audit.Role, audit.RegistrationIndex = 90, v1alpha1.RoleAudit, 3
	return []v1alpha1.ResolvedInterceptor{auth, rl, redact, audit}
}

// newChain builds a chain on a fresh registry and closes it at the end.
func newChain(t testing.TB, resolved []v1alpha1.ResolvedInterceptor, reg chain.Registry,
	opts ...chain.Option) (*chain.Chain, *prometheus.Registry) {
	t.Helper()
	pr := prometheus.NewRegistry()
	opts = append([]chain.Option{chain.WithResendInterval(2 * time.Millisecond)}, opts...)
	c, err := chain.New(resolved, reg, chain.NewMetrics(pr), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c, pr
}

// metric is the value of the counter or gauge name with exactly labels (0
// when absent).
func metric(g Gomega, pr *prometheus.Registry, name string, labels ...string) float64 {
	families, err := pr.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

// recorder records the order of hooks and dispatches.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) pre(name string, err error) chain.Impl {
	return chain.Impl{Pre: func(context.Context, *chain.Call) error { r.add(name); return err }}
}

func (r *recorder) around(name string) chain.Impl {
	return chain.Impl{Around: func(context.Context, *chain.Call) (func(chain.Outcome), error) {
		r.add(name + ":acquire")
		return func(chain.Outcome) { r.add(name + ":release") }, nil
	}}
}

func (r *recorder) post(name string, err error) chain.Impl {
	return chain.Impl{Post: func(context.Context, *chain.Call, *chain.Outcome) error { r.add(name); return err }}
}

func (r *recorder) dispatch(result string) func(context.Context, *chain.Call) chain.Outcome {
	return func(context.Context, *chain.Call) chain.Outcome {
		r.add("dispatch")
		return chain.Outcome{Result: result}
	}
}

func toolCall() *chain.Call {
	return &chain.Call{Kind: chain.KindTool, Namespace: "team", Run: "r1", Attempt: "r1-1", Policy: "default",
		Token: "tok-secret-value", Tool: "notes.write", Effect: v1alpha1.EffectWrite, Risk: v1alpha1.RiskLow,
		Arguments: map[string]any{"text": "hello"}}
}

// flakyWriter fails every Write while failing is set; it keeps what it
// accepted.
type flakyWriter struct {
	failing atomic.Bool
	mu      sync.Mutex
	buf     bytes.Buffer
}

var errDiskFull = errors.New("no space left on device")

func (w *flakyWriter) Write(p []byte) (int, error) {
	if w.failing.Load() {
		return 0, errDiskFull
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *flakyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// syncAudit is a buffered interceptor that writes an AuditRecord to w in
// the call, synchronously: a failed write is its error, which the chain's
// resend buffer keeps (the built-in audit queues its lines instead).
func syncAudit(w io.Writer) chain.Impl {
	return chain.Impl{Post: func(_ context.Context, call *chain.Call, out *chain.Outcome) error {
		line, err := json.Marshal(chain.AuditRecord{Time: call.Time, Namespace: call.Namespace, Run: call.Run,
			Attempt: call.Attempt, Identity: call.Identity, Kind: call.Kind, Tool: call.Tool,
			Arguments: call.Arguments, Outcome: chain.OutcomeOK, ResultBytes: len(out.Result)})
		if err != nil {
			return err
		}
		_, err = w.Write(append(line, '\n'))
		return err
	}}
}

// withAudit is reg with audit replaced by impl.
func withAudit(reg chain.Registry, impl chain.Impl) chain.Registry {
	reg[chain.NameAudit] = impl
	return reg
}

// gateWriter blocks every Write until open is closed; entered receives one
// value per Write that started.
type gateWriter struct {
	open    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func newGateWriter(t testing.TB) *gateWriter {
	w := &gateWriter{open: make(chan struct{}), entered: make(chan struct{}, 1024)}
	t.Cleanup(w.release)
	return w
}

func (w *gateWriter) Write(p []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *gateWriter) release() {
	select {
	case <-w.open:
	default:
		close(w.open)
	}
}

func (w *gateWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
