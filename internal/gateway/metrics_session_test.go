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

package gateway

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The usage-by-session series are bounded: past MaxSessionSeries sessions a
// process counts the rest under session "_other", and says how often.
func TestSessionSeriesAreBounded(t *testing.T) {
	defer func(n int) { MaxSessionSeries = n }(MaxSessionSeries)
	MaxSessionSeries = 3
	m := newMetrics(prometheus.NewRegistry())
	keeperOf := func(session string) *keeper {
		return &keeper{key: types.NamespacedName{Namespace: "team-a", Name: session + "-1"}, obj: &v1alpha1.RunAttempt{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelSession: session}},
			Spec:       v1alpha1.RunAttemptSpec{Policy: v1alpha1.PolicySnapshot{Name: "p"}},
		}}
	}
	for i := range 5 {
		k := keeperOf(fmt.Sprintf("s%d", i))
		m.sessionModelRequest(k, 10)
		m.sessionModelRequest(k, 5)
		m.sessionToolCall(k)
		m.sessionRefusal(k, "grant_exhausted")
	}
	if n := testutil.CollectAndCount(m.sessionRequests); n != 4 {
		t.Errorf("%d model-request series, want 3 sessions and %q", n, OtherSessions)
	}
	if v := testutil.ToFloat64(m.sessionTokens.WithLabelValues("team-a", "s0", "p")); v != 15 {
		t.Errorf("tokens of s0: %v, want 15", v)
	}
	if v := testutil.ToFloat64(m.sessionRequests.WithLabelValues("team-a", OtherSessions, "p")); v != 4 {
		t.Errorf("model requests of %s: %v, want 4 (two sessions past the bound, two each)", OtherSessions, v)
	}
	if v := testutil.ToFloat64(m.sessionRefusals.WithLabelValues("team-a", "s2", "p", "grant_exhausted")); v != 1 {
		t.Errorf("refusals of s2: %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.sessionOverflow); v != 8 {
		t.Errorf("overflow: %v, want 8 (two sessions x four counts)", v)
	}
}
