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
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// The gateway's events carry the attempt's policy snapshot's
// spec.events.maxAge as their TTL, or its default without one.
func TestRunStreamEventsCarryThePolicyMaxAge(t *testing.T) {
	for name, tc := range map[string]struct {
		events v1alpha1.EventRetention
		want   time.Duration
	}{
		"maxAge 1h":          {v1alpha1.EventRetention{MaxAge: &metav1.Duration{Duration: time.Hour}}, time.Hour},
		"no events snapshot": {v1alpha1.EventRetention{}, v1alpha1.DefaultEventMaxAge},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			up := httptest.NewServer(&upstream.Server{})
			t.Cleanup(up.Close)
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "provider",
				Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}}, Data: map[string][]byte{"key": []byte("sk-1")}}
			col := &events{}
			e := gatewaytest.Start(t, gatewaytest.Options{Objects: []client.Object{secret}, Events: col,
				Mutate: func(ra *v1alpha1.RunAttempt) {
					for i := range ra.Spec.Policy.Models {
						ra.Spec.Policy.Models[i].BaseURL = up.URL + "/v1"
					}
					ra.Spec.Policy.Events = tc.events
				}})
			resp := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token,
				chat("scripted", `,"stream":true,"agentrun_scripted":{"say":"Hello."}`))
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			g.Eventually(col.types).Should(ContainElement("STEP_FINISHED"))
			for _, ev := range col.all() {
				g.Expect(ev.TTL).To(Equal(tc.want), "%s", ev.Type)
			}
		})
	}
}
