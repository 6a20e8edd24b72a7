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

package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

var testLease = types.NamespacedName{Namespace: "agentrun-system", Name: "agentrun-gateway-node-a"}

// livenessEnv is a gateway with a Lease renewed every 50ms, in front of an
// attempt whose heartbeat interval is interval.
func livenessEnv(t *testing.T, interval time.Duration) *gatewaytest.Env {
	return gatewaytest.Start(t, gatewaytest.Options{
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.HeartbeatInterval = &metav1.Duration{Duration: interval}
		},
		Liveness: gateway.Liveness{Lease: testLease, RenewInterval: 50 * time.Millisecond},
	})
}

func lease(t *testing.T, e *gatewaytest.Env) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := e.Client.Get(context.Background(), testLease, l); err != nil {
		return nil
	}
	return l
}

// An attempt the agent keeps calling costs no heartbeat write: the first
// call takes the attempt (one write naming the gateway's Lease), calls for
// three heartbeat intervals add nothing, and an open watch keeps it alive
// with no call at all. Silence past the interval is one write (silentSince
// = when it was last seen), and the next call one more (cleared). The
// gateway's own heartbeat is its Lease, renewed on its own.
func TestLivenessWritesOnlyChanges(t *testing.T) {
	g := NewWithT(t)
	const interval = 400 * time.Millisecond
	e := livenessEnv(t, interval)

	g.Expect(as(t, e, http.MethodPost, self("/heartbeat"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Eventually(e.Writes.Load, apiWait, apiPoll).Should(Equal(int64(1)), "taking the attempt over is one write")
	lv := e.Status().Liveness
	g.Expect(lv).NotTo(BeNil())
	g.Expect(lv.Gateway).To(Equal(testLease.String()))
	g.Expect(lv.SilentSince).To(BeNil())
	g.Eventually(func(g Gomega) {
		l := lease(t, e)
		g.Expect(l).NotTo(BeNil())
		g.Expect(*l.Spec.HolderIdentity).To(Equal(lv.Holder))
		g.Expect(l.Labels).To(HaveKeyWithValue("app.kubernetes.io/name", "agentrun-gateway"))
	}, apiWait, apiPoll).Should(Succeed(), "the gateway holds its Lease under the identity it recorded")
	renewed := lease(t, e).Spec.RenewTime.Time

	// Calls every 50ms for three intervals (without a Lease: a heartbeat
	// write every third of an interval, ~9 writes).
	calls := 0
	tick := time.NewTicker(50 * time.Millisecond)
	for end := time.Now().Add(3 * interval); time.Now().Before(end); <-tick.C {
		g.Expect(as(t, e, http.MethodPost, self("/heartbeat"), `{}`).status).To(Equal(http.StatusNoContent))
		g.Expect(as(t, e, http.MethodGet, self(""), nil).status).To(Equal(http.StatusOK))
		calls += 2
	}
	tick.Stop()
	g.Expect(calls).To(BeNumerically(">=", 12), "many calls (40 on an idle machine; fewer on a busy one)")
	g.Expect(e.Writes.Load()).To(Equal(int64(1)), "%d calls in three heartbeat intervals, no heartbeat write", calls)
	t.Logf("%d calls in %s (3 heartbeat intervals): %d status write (the takeover)", calls, 3*interval, e.Writes.Load())
	g.Expect(lease(t, e).Spec.RenewTime.After(renewed)).To(BeTrue(), "the Lease was renewed meanwhile")

	// An open watch is the agent being seen: no call for three intervals,
	// still no write.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL()+self("/watch"), nil)
	req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Consistently(e.Writes.Load, 3*interval, 20*time.Millisecond).Should(Equal(int64(1)), "an open watch keeps the attempt alive")
	cancel()
	_ = resp.Body.Close()
	closed := time.Now()

	// Silence: exactly one write, a heartbeat interval after the watch closed.
	g.Eventually(e.Writes.Load, apiWait, apiPoll).Should(Equal(int64(2)), "silence past the interval is one write")
	silent := e.Status().Liveness
	g.Expect(silent.SilentSince).NotTo(BeNil())
	g.Expect(silent.SilentSince.Time).To(BeTemporally("~", closed, 1500*time.Millisecond), "silentSince is when it was last seen")
	g.Expect(silent.Holder).To(Equal(lv.Holder))
	g.Consistently(e.Writes.Load, 3*interval, 20*time.Millisecond).Should(Equal(int64(2)), "a silence is written once")
	t.Logf("silence: write %d sets silentSince %s (watch closed %s)", e.Writes.Load(), silent.SilentSince.Format(time.RFC3339),
		closed.Format(time.RFC3339Nano))

	// It speaks again: one write clears silentSince.
	g.Expect(as(t, e, http.MethodPost, self("/heartbeat"), `{}`).status).To(Equal(http.StatusNoContent))
	g.Eventually(func() *metav1.Time { return e.Status().Liveness.SilentSince }, apiWait, apiPoll).Should(BeNil())
	// The fake API server stores the status before the write is counted.
	g.Eventually(e.Writes.Load, apiWait, apiPoll).Should(Equal(int64(3)), "clearing it is one write")
	g.Consistently(e.Writes.Load, interval, 20*time.Millisecond).Should(Equal(int64(3)), "and only one")
}

// A request under way is the agent being seen, however long it takes: a
// call waiting for an approval for several intervals is not silence.
func TestLivenessRequestUnderWayIsNotSilence(t *testing.T) {
	g := NewWithT(t)
	const interval = 200 * time.Millisecond
	e := livenessEnv(t, interval)
	g.Expect(as(t, e, http.MethodGet, self(""), nil).status).To(Equal(http.StatusOK))
	g.Eventually(e.Writes.Load, apiWait, apiPoll).Should(Equal(int64(1)))
	// A slow model request: the scripted upstream streams it over 5 intervals.
	done := make(chan reply, 1)
	go func() {
		body := chatTurn(upstream.Turn{Say: strings.Repeat("sixteen chars.. ", 5), ChunkDelayMS: int(interval / time.Millisecond)})
		body["stream"] = true
		done <- as(t, e, http.MethodPost, gatewayapi.ModelPathPrefix+"/chat/completions", body)
	}()
	g.Consistently(func() *metav1.Time { return e.Status().Liveness.SilentSince }, 4*interval, 20*time.Millisecond).
		Should(BeNil(), "a request under way is no silence")
	g.Eventually(done, apiWait).Should(Receive())
	g.Eventually(func() *metav1.Time { return e.Status().Liveness.SilentSince }, apiWait, apiPoll).ShouldNot(BeNil(),
		"once it ended, silence counts")
}

// A restarted gateway (a new process under the same Lease, another holder
// identity) takes the attempt over on its first call: one write. When
// another replica took the attempt less than a heartbeat interval ago, a
// call does not take it back: balancing between replicas costs at most one
// takeover write per interval.
func TestLivenessTakeover(t *testing.T) {
	g := NewWithT(t)
	// since has whole seconds: the other replica's takeover is up to 1s
	// older than it was when it is read back.
	const interval = 2 * time.Second
	e := livenessEnv(t, interval)
	g.Expect(as(t, e, http.MethodGet, self(""), nil).status).To(Equal(http.StatusOK))
	g.Eventually(func() *v1alpha1.AttemptLiveness { return e.Status().Liveness }, apiWait, apiPoll).ShouldNot(BeNil())
	first := e.Status().Liveness

	e.Crash()
	e.Restart()
	g.Expect(as(t, e, http.MethodGet, self(""), nil).status).To(Equal(http.StatusOK))
	g.Eventually(func() string { return e.Status().Liveness.Holder }, apiWait, apiPoll).ShouldNot(Equal(first.Holder),
		"the new process takes the attempt over at once")
	mine := e.Status().Liveness
	g.Expect(mine.Gateway).To(Equal(first.Gateway))
	g.Eventually(func() string { return *lease(t, e).Spec.HolderIdentity }, apiWait, apiPoll).Should(Equal(mine.Holder))

	// Another replica takes it (its write, seen by this gateway's informer).
	ra := e.Get()
	ra.Status.Liveness = &v1alpha1.AttemptLiveness{Gateway: "agentrun-system/agentrun-gateway-node-b", Holder: "b_1",
		Since: metav1.Now()}
	g.Expect(e.Client.Status().Update(context.Background(), ra)).To(Succeed())
	e.Gateway.Observe(e.Get())
	writes := e.Writes.Load()
	for range 5 {
		g.Expect(as(t, e, http.MethodPost, self("/heartbeat"), `{}`).status).To(Equal(http.StatusNoContent))
	}
	g.Consistently(func() string { return e.Status().Liveness.Holder }, interval/4, 20*time.Millisecond).Should(Equal("b_1"),
		"no takeover within an interval of the last one")
	g.Expect(e.Writes.Load()).To(Equal(writes))
	g.Eventually(func() string {
		as(t, e, http.MethodPost, self("/heartbeat"), `{}`)
		return e.Status().Liveness.Holder
	}, apiWait, 50*time.Millisecond).Should(Equal(mine.Holder), "after an interval the call takes it back")
	g.Expect(e.Writes.Load()).To(Equal(writes+1), "one takeover write")
}
