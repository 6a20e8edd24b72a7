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
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

// reviewServer is an API server that accepts only the token "good" and
// counts the TokenReviews it answers; block, when set, holds each review
// until it is closed.
type reviewServer struct {
	reviews, inFlight, maxInFlight atomic.Int64
	block                          chan struct{}
}

func (s *reviewServer) client() client.Client {
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(gatewaytest.Scheme()).Build(), interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			tr, ok := obj.(*authenticationv1.TokenReview)
			if !ok {
				return fmt.Errorf("unexpected create of %T", obj)
			}
			s.reviews.Add(1)
			n := s.inFlight.Add(1)
			defer s.inFlight.Add(-1)
			for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
			}
			if s.block != nil {
				<-s.block
			}
			if tr.Spec.Token == "good" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
					User: authenticationv1.UserInfo{Username: "system:serviceaccount:team:agentrun-runner"}}
			}
			return nil
		},
	})
}

// Security review 25, item 5: a rejected token is remembered (briefly, by
// its hash, in a bounded table), so 200 requests with the same garbage
// token make one TokenReview, not 200; once RejectTTL has passed it is
// asked again. A valid token is unaffected.
func TestARejectedTokenIsNotReviewedAgain(t *testing.T) {
	g := NewWithT(t)
	s := &reviewServer{}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	reg := prometheus.NewRegistry()
	tr := &gateway.TokenReviewer{Client: s.client(), Audience: gatewayapi.Audience, RejectTTL: 5 * time.Second,
		Clock: clk, Registry: reg}
	for range 200 {
		_, err := tr.Authenticate(context.Background(), "garbage")
		g.Expect(err).To(MatchError(gateway.ErrUnauthenticated))
	}
	g.Expect(s.reviews.Load()).To(Equal(int64(1)), "200 requests with one garbage token, one TokenReview")
	g.Expect(counterValue(t, reg, "agentrun_gateway_token_cache_hits_total", "rejected")).To(Equal(199.0))
	g.Expect(counterValue(t, reg, "agentrun_gateway_token_reviews_total", "rejected")).To(Equal(1.0))

	clk.SetTime(clk.Now().Add(5 * time.Second))
	_, err := tr.Authenticate(context.Background(), "garbage")
	g.Expect(err).To(MatchError(gateway.ErrUnauthenticated))
	g.Expect(s.reviews.Load()).To(Equal(int64(2)), "after RejectTTL the token is asked about again")

	id, err := tr.Authenticate(context.Background(), "good")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(id.Namespace).To(Equal("team"))
}

// Security review 25, item 5: distinct garbage tokens each need a review,
// but no more than MaxInFlight are under way at once; the others wait for
// a slot (and give up with their request).
func TestTokenReviewsUnderWayAreBounded(t *testing.T) {
	g := NewWithT(t)
	s := &reviewServer{block: make(chan struct{})}
	tr := &gateway.TokenReviewer{Client: s.client(), Audience: gatewayapi.Audience, MaxInFlight: 4}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { _, _ = tr.Authenticate(context.Background(), fmt.Sprintf("garbage-%d", i)) })
	}
	g.Eventually(s.inFlight.Load, apiWait, apiPoll).Should(Equal(int64(4)))
	g.Consistently(s.maxInFlight.Load, 100*time.Millisecond, apiPoll).Should(Equal(int64(4)), "never more than MaxInFlight at once")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tr.Authenticate(ctx, "garbage-late")
	g.Expect(err).To(MatchError(ContainSubstring("waiting for one of 4 reviews under way")))
	g.Expect(err).NotTo(MatchError(gateway.ErrUnauthenticated), "not answered: the gateway says 503, try again")

	close(s.block)
	wg.Wait()
	g.Expect(s.reviews.Load()).To(Equal(int64(50)))
	g.Expect(s.maxInFlight.Load()).To(Equal(int64(4)))
}

// counterValue is the value of the counter name whose one label has value.
func counterValue(t testing.TB, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
