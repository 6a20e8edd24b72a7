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

package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// liveGateway is a real agentrun-gateway with a liveness Lease in front of
// the suite's API server, serving one attempt pod, and that pod's agent
// calling it on a ticker.
type liveGateway struct {
	gw     *gateway.Gateway
	srv    *httptest.Server
	token  string
	lease  types.NamespacedName
	writes atomic.Int64 // the gateway's RunAttempt status writes
	calls  atomic.Int64 // the agent's calls the gateway answered
	stop   chan struct{}
	done   chan struct{}
}

// Heartbeat settings of the liveness stories.
const (
	liveInterval = 500 * time.Millisecond
	liveTimeout  = 2 * time.Second
)

// startLiveGateway starts the gateway (its Lease renewed every 200ms) for
// attempt 1 of run, whose pod must exist, and the agent calling
// POST /self/heartbeat every 200ms.
func startLiveGateway(w *world, run string) *liveGateway {
	GinkgoHelper()
	pod := w.pod(run, 1)
	lg := &liveGateway{token: "token-of-" + pod.Name, lease: types.NamespacedName{Namespace: w.ns, Name: "gateway-" + run},
		stop: make(chan struct{}), done: make(chan struct{})}
	c := interceptor.NewClient(k8sClient, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if err == nil && sub == "status" {
				lg.writes.Add(1)
			}
			return err
		},
	})
	gw, err := gateway.New(gateway.Options{
		Client: c,
		Authenticator: gateway.StaticTokens{lg.token: {
			Username: "system:serviceaccount:" + w.ns + ":agentrun-runner", Namespace: w.ns,
			PodName: pod.Name, PodUID: string(pod.UID),
		}},
		FlushInterval: 100 * time.Millisecond,
		PollInterval:  100 * time.Millisecond,
		Liveness:      gateway.Liveness{Lease: lg.lease, RenewInterval: 200 * time.Millisecond},
	})
	Expect(err).NotTo(HaveOccurred())
	lg.gw, lg.srv = gw, httptest.NewServer(gw.Handler())
	DeferCleanup(lg.kill)
	go lg.agent()
	return lg
}

// agent calls the gateway every 200ms until stopAgent.
func (lg *liveGateway) agent() {
	defer close(lg.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		req, _ := http.NewRequest(http.MethodPost, lg.srv.URL+gatewayapi.PathPrefix+"/self/heartbeat", nil)
		req.Header.Set("Authorization", "Bearer "+lg.token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			if resp.StatusCode == http.StatusNoContent {
				lg.calls.Add(1)
			}
			_ = resp.Body.Close()
		}
		select {
		case <-lg.stop:
			return
		case <-t.C:
		}
	}
}

// stopAgent stops the agent's calls (its process hangs or dies).
func (lg *liveGateway) stopAgent() {
	select {
	case <-lg.stop:
	default:
		close(lg.stop)
	}
	<-lg.done
}

// kill stops the gateway as a crash would: nothing more is served, its
// Lease is no longer renewed, and it writes nothing on the way out.
func (lg *liveGateway) kill() {
	lg.srv.CloseClientConnections()
	lg.srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time for last writes
	_ = lg.gw.Shutdown(ctx)
}

func (w *world) liveRun(name string) {
	GinkgoHelper()
	w.run(name, func(r *v1alpha1.ResearchRun) {
		r.Spec.Recovery.HeartbeatInterval = &metav1.Duration{Duration: liveInterval}
		r.Spec.Recovery.HeartbeatTimeout = &metav1.Duration{Duration: liveTimeout}
	})
	w.start(name, 1)
}

var _ = Describe("Liveness through the gateway", func() {
	var w *world
	BeforeEach(func() { w = newWorld() })

	It("keeps an attempt whose agent keeps calling, with one status write in all", func() {
		w.liveRun("alive")
		lg := startLiveGateway(w, "alive")
		Eventually(func() *v1alpha1.AttemptLiveness { return w.attempt("alive", 1).Status.Liveness }, timeout, interval).
			ShouldNot(BeNil(), "the gateway took the attempt")
		Consistently(func() v1alpha1.Phase { return w.get("alive").Status.Phase }, 3*liveTimeout, interval).
			Should(Equal(v1alpha1.PhaseRunning), "an attempt the gateway sees is never recovered")
		lv := w.attempt("alive", 1).Status.Liveness
		Expect(lv.Gateway).To(Equal(lg.lease.String()))
		Expect(lv.SilentSince).To(BeNil())
		Expect(lg.calls.Load()).To(BeNumerically(">=", 25))
		Expect(lg.writes.Load()).To(Equal(int64(1)), "%d heartbeats over %s: the takeover is the only write",
			lg.calls.Load(), 3*liveTimeout)
		l := &coordinationv1.Lease{}
		Expect(k8sClient.Get(ctx, lg.lease, l)).To(Succeed())
		Expect(*l.Spec.HolderIdentity).To(Equal(lv.Holder))
		GinkgoWriter.Printf("%d agent calls in %s: %d RunAttempt status write(s) by the gateway, Lease %s renewed at %s\n",
			lg.calls.Load(), 3*liveTimeout, lg.writes.Load(), lg.lease, l.Spec.RenewTime.Format(time.RFC3339Nano))
	})

	It("recovers an attempt whose agent stops calling, heartbeatTimeout after it was last seen", func() {
		w.liveRun("hangs")
		lg := startLiveGateway(w, "hangs")
		Eventually(func() *v1alpha1.AttemptLiveness { return w.attempt("hangs", 1).Status.Liveness }, timeout, interval).
			ShouldNot(BeNil())
		lg.stopAgent()
		last := time.Now()
		Eventually(func() *metav1.Time {
			if lv := w.attempt("hangs", 1).Status.Liveness; lv != nil {
				return lv.SilentSince
			}
			return nil
		}, timeout, interval).ShouldNot(BeNil(), "the gateway wrote the silence")
		run := w.eventually("hangs", v1alpha1.PhaseRecovering, "")
		GinkgoWriter.Printf("agent stopped; Recovering %s later: %s\n", time.Since(last).Round(10*time.Millisecond), run.Status.Message)
		Expect(time.Since(last)).To(BeNumerically(">=", liveTimeout-300*time.Millisecond),
			"not before the timeout (counted from the agent's last call, up to one 200ms tick before it stopped)")
		Expect(run.Status.Message).To(ContainSubstring("no heartbeat for"))
		w.attempt("hangs", 2)
	})

	It("recovers an attempt whose gateway's Lease lapses, heartbeatTimeout after its last renewal", func() {
		w.liveRun("orphan")
		lg := startLiveGateway(w, "orphan")
		Eventually(func() *v1alpha1.AttemptLiveness { return w.attempt("orphan", 1).Status.Liveness }, timeout, interval).
			ShouldNot(BeNil())
		Consistently(func() v1alpha1.Phase { return w.get("orphan").Status.Phase }, liveTimeout, interval).
			Should(Equal(v1alpha1.PhaseRunning))
		lg.kill() // the agent keeps trying; nobody answers, nobody writes
		died := time.Now()
		run := w.eventually("orphan", v1alpha1.PhaseRecovering, "")
		GinkgoWriter.Printf("gateway killed; Recovering %s later: %s\n", time.Since(died).Round(10*time.Millisecond), run.Status.Message)
		Expect(time.Since(died)).To(BeNumerically(">=", liveTimeout-300*time.Millisecond),
			"not before the timeout (counted from the last renewal, up to one 200ms renewal before the kill)")
		Expect(run.Status.Message).To(ContainSubstring("no heartbeat for"))
		Expect(w.attempt("orphan", 1).Status.Liveness.SilentSince).To(BeNil(), "the Lease's lapse, not a silence, decided it")
		lg.stopAgent()
	})
})
