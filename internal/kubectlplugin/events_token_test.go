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

package kubectlplugin

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentrun-dev/agentrun/internal/stream/sse"
)

// The plugin's audience is the stream server's default.
func TestStreamAudienceIsTheStreamServers(t *testing.T) {
	if StreamAudience != sse.DefaultAudience {
		t.Errorf("StreamAudience %q, agentrun-stream's default %q", StreamAudience, sse.DefaultAudience)
	}
}

// `events --server … --service-account NAME` requests a token of that
// service account issued for agentrun-stream's audience — which the API
// server does not accept as its own — and sends it. Without it (or
// --token) none of the kubeconfig's credentials reach the stream server.
func TestEventsServiceAccountTokenIsForTheStreamAudience(t *testing.T) {
	fixtureTeamA(t)
	ctx := context.Background()
	kc := kubernetes.NewForConfigOrDie(envCfg)
	if _, err := kc.CoreV1().ServiceAccounts(teamA).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stream-reader"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	fs := newFakeStream(t, teamA, "survey-vector-dbs")
	srv := httptest.NewServer(fs)
	defer srv.Close()

	f := &testFactory{c: k8s, cfg: envCfg, kube: kc}
	if _, _, err := run(t, time.Now(), f, "events", "-n", teamA, "survey-vector-dbs", "--server", srv.URL,
		"--service-account", "stream-reader"); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	sent := append([]string(nil), fs.auth...)
	fs.mu.Unlock()
	if len(sent) != 1 || !strings.HasPrefix(sent[0], "Bearer ") {
		t.Fatalf("Authorization headers sent: %q", sent)
	}
	token := strings.TrimPrefix(sent[0], "Bearer ")
	review := func(audiences ...string) authenticationv1.TokenReviewStatus {
		t.Helper()
		tr, err := kc.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status
	}
	if st := review(StreamAudience); !st.Authenticated || st.User.Username != "system:serviceaccount:team-a:stream-reader" {
		t.Errorf("the token for the stream's audience: %+v", st)
	}
	if st := review(); st.Authenticated {
		t.Errorf("the API server accepts the plugin's stream token as its own: %+v", st)
	}

	// A kubeconfig with a bearer token: it is not sent to the stream server.
	withToken := rest.AnonymousClientConfig(envCfg)
	withToken.BearerToken = "kubeconfig-token"
	fs.mu.Lock()
	fs.auth = nil
	fs.mu.Unlock()
	if _, _, err := run(t, time.Now(), &testFactory{c: k8s, cfg: withToken, kube: kc},
		"events", "-n", teamA, "survey-vector-dbs", "--server", srv.URL); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.auth) != 1 || fs.auth[0] != "" {
		t.Errorf("the kubeconfig's credentials reached the stream server: %q", fs.auth)
	}
}
