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

package sse

import (
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentrun-dev/agentrun/internal/stream/store"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/test/utils"
)

// The production authorizer against a real kube-apiserver (envtest, RBAC
// authorization): a ServiceAccount's TokenRequest token, its RBAC granted
// step by step, through the authorizer alone and through the SSE handler.
func TestKubeAuthorizer(t *testing.T) {
	g := NewWithT(t)
	env := &envtest.Environment{BinaryAssetsDirectory: utils.EnvtestAssets()}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(cfg)

	ns := runA.Namespace // the fixture's run
	const other = "team-b"
	for _, n := range []string{ns, other} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := func(audiences ...string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "viewer", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	viewerToken := token(DefaultAudience)
	const viewer = "system:serviceaccount:team-a:viewer"

	// Small TTLs: a new RoleBinding shows within 200 ms.
	fast := KubeAuthOptions{AllowedCacheTTL: 200 * time.Millisecond, DeniedCacheTTL: 200 * time.Millisecond}
	az, err := NewKubeAuthorizer(cfg, fast)
	g.Expect(err).NotTo(HaveOccurred())
	attrs := func(namespace string) Attributes {
		return Attributes{Verb: VerbGet, APIGroup: APIGroup, Resource: ResourceResearchRuns, Namespace: namespace, Name: runA.Name}
	}
	request := func(header map[string]string, query string) *http.Request {
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, Path(runA)+query, nil)
		for k, v := range header {
			r.Header.Set(k, v)
		}
		return r
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	decide := func(r *http.Request, namespace string) Decision {
		t.Helper()
		d, err := az.Authorize(ctx, r, attrs(namespace))
		g.Expect(err).NotTo(HaveOccurred())
		return d
	}

	f := newFixture(t, store.Config{}, Options{Authorizer: az})
	f.publish(runA, step(0))
	status := func(header map[string]string) (int, string) {
		resp := f.get(ctx, f.url(runA, ""), header)
		if resp.StatusCode == http.StatusOK {
			_ = resp.Body.Close()
			return resp.StatusCode, ""
		}
		st := readStatus(t, resp)
		msg, _ := st["message"].(string)
		return resp.StatusCode, st["reason"].(string) + ": " + msg
	}

	t.Run("no or invalid token is not authenticated", func(t *testing.T) {
		g := NewWithT(t)
		tampered := viewerToken[:len(viewerToken)-4] + "AAAA"
		for name, r := range map[string]*http.Request{
			"no header":    request(nil, ""),
			"not a token":  request(bearer("not-a-token"), ""),
			"tampered":     request(bearer(tampered), ""),
			"basic scheme": request(map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("viewer:x"))}, ""),
			// Headers only: neither a query parameter nor a WebSocket
			// protocol carries a token.
			"query parameter": request(nil, "?access_token="+viewerToken),
			"websocket protocol": request(map[string]string{
				"Sec-WebSocket-Protocol": "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(viewerToken)),
				"Connection":             "Upgrade", "Upgrade": "websocket",
			}, ""),
		} {
			d := decide(r, ns)
			g.Expect(d.Authenticated).To(BeFalse(), name)
			g.Expect(d.Allowed).To(BeFalse(), name)
			g.Expect(d.Reason).NotTo(ContainSubstring(tampered[:40]), name)
			t.Logf("%s: %q", name, d.Reason)
		}
		code, msg := status(nil)
		g.Expect(code).To(Equal(http.StatusUnauthorized))
		g.Expect(msg).To(ContainSubstring(`Unauthorized: Unauthorized: get researchruns.agentrun.dev "survey.v2" in namespace "team-a" needs an authenticated caller`))
		code, msg = status(bearer(tampered))
		g.Expect(code).To(Equal(http.StatusUnauthorized), msg)
		g.Expect(msg).NotTo(ContainSubstring(tampered[:40]))
	})

	t.Run("viewer without RBAC is not allowed", func(t *testing.T) {
		g := NewWithT(t)
		r := request(bearer(viewerToken), "")
		d := decide(r, ns)
		g.Expect(d).To(deniedAs(viewer))
		g.Expect(d.Reason).NotTo(ContainSubstring(viewerToken[:40]))
		g.Expect(r.Header.Get("Authorization")).To(Equal("Bearer "+viewerToken), "the caller's request is left as it was")
		t.Logf("reason %q", d.Reason)
		code, msg := status(bearer(viewerToken))
		g.Expect(code).To(Equal(http.StatusForbidden))
		g.Expect(msg).To(ContainSubstring(`Forbidden: researchruns.agentrun.dev "survey.v2" is forbidden: ` +
			`User "system:serviceaccount:team-a:viewer" cannot get resource "researchruns" in API group "agentrun.dev" in the namespace "team-a"`))
		g.Expect(msg).NotTo(ContainSubstring(viewerToken[:40]))
	})

	grant := func(namespace string) {
		t.Helper()
		_, err := cs.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{APIGroup}, Resources: []string{ResourceResearchRuns}, Verbs: []string{VerbGet}}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "run-viewer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "run-viewer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "viewer", Namespace: ns}},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	t.Run("a role in another namespace does not allow", func(t *testing.T) {
		g := NewWithT(t)
		grant(other)
		// The grant is in effect (the other namespace's run is allowed)...
		g.Eventually(func() bool { return decide(request(bearer(viewerToken), ""), other).Allowed }).
			WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(BeTrue())
		// ...and, through and past the denied cache, still not in the run's
		// namespace.
		g.Consistently(func() Decision { return decide(request(bearer(viewerToken), ""), ns) }).
			WithTimeout(2 * fast.DeniedCacheTTL).WithPolling(50 * time.Millisecond).Should(deniedAs(viewer))
	})

	t.Run("a Role and RoleBinding in the namespace allow", func(t *testing.T) {
		g := NewWithT(t)
		grant(ns)
		g.Eventually(func() Decision { return decide(request(bearer(viewerToken), ""), ns) }).
			WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).
			Should(Equal(Decision{Authenticated: true, Allowed: true, User: viewer}))
		code, msg := status(bearer(viewerToken))
		g.Expect(code).To(Equal(http.StatusOK), msg)
		// Another run's name in the namespace is allowed too (the Role names
		// none), another verb is not.
		d, err := az.Authorize(ctx, request(bearer(viewerToken), ""), Attributes{
			Verb: "delete", APIGroup: APIGroup, Resource: ResourceResearchRuns, Namespace: ns, Name: runA.Name,
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Allowed).To(BeFalse())
	})

	t.Run("audiences", func(t *testing.T) {
		g := NewWithT(t)
		const custom = "stream.example.org"
		scoped, err := NewKubeAuthorizer(cfg, KubeAuthOptions{Audiences: []string{custom}})
		g.Expect(err).NotTo(HaveOccurred())
		for name, tc := range map[string]struct {
			az    Authorizer
			token string
			ok    bool
		}{
			// By default only a token issued for agentrun-stream: not one
			// of the API server's audience (kubectl's, `kubectl create
			// token NAME`), not one minted for the gateway.
			"default: the stream's audience": {az, viewerToken, true},
			"default: the API server's":      {az, token(), false},
			"default: the gateway's":         {az, token(gatewayapi.Audience), false},
			"custom: its audience":           {scoped, token(custom), true},
			"custom: the default's":          {scoped, viewerToken, false},
		} {
			d, err := tc.az.Authorize(ctx, request(bearer(tc.token), ""), attrs(ns))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Authenticated).To(Equal(tc.ok), "%s: %+v", name, d)
			g.Expect(d.Allowed).To(Equal(tc.ok), name)
		}
		// Through the handler: 401, saying which audience it takes.
		code, msg := status(bearer(token()))
		g.Expect(code).To(Equal(http.StatusUnauthorized))
		g.Expect(msg).To(ContainSubstring(`accepts tokens issued for audience "agentrun-stream" only (kubectl create token NAME --audience agentrun-stream)`))
	})

	t.Run("API server unreachable fails closed", func(t *testing.T) {
		g := NewWithT(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		g.Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		g.Expect(l.Close()).To(Succeed())
		down := rest.CopyConfig(cfg)
		down.Host = "https://" + addr
		once := &wait.Backoff{Duration: 10 * time.Millisecond, Steps: 1}
		dz, err := NewKubeAuthorizer(down, KubeAuthOptions{RetryBackoff: once, Timeout: 2 * time.Second})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = dz.Authorize(ctx, request(bearer(viewerToken), ""), attrs(ns))
		g.Expect(err).To(MatchError(ContainSubstring("TokenReview")))
		g.Expect(err.Error()).NotTo(ContainSubstring(viewerToken[:40]))
		t.Logf("unreachable: %v", err)

		// An identity that may not create TokenReviews: the review fails,
		// which is not the caller's fault either.
		weak := rest.AnonymousClientConfig(cfg)
		weak.BearerToken = token() // the API server's audience: the viewer's own identity
		wz, err := NewKubeAuthorizer(weak, KubeAuthOptions{RetryBackoff: once})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = wz.Authorize(ctx, request(bearer(viewerToken), ""), attrs(ns))
		g.Expect(err).To(MatchError(ContainSubstring("forbidden")))
		t.Logf("no permission for TokenReview: %v", err)

		fd := newFixture(t, store.Config{}, Options{Authorizer: dz})
		resp := fd.get(ctx, fd.url(runA, ""), bearer(viewerToken))
		g.Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
		st := readStatus(t, resp)
		g.Expect(st["reason"]).To(Equal("ServiceUnavailable"))
		g.Expect(st["message"]).NotTo(ContainSubstring(viewerToken[:40]))
	})
}

// deniedAs matches an authenticated, not allowed decision of user.
func deniedAs(user string) OmegaMatcher {
	return And(
		HaveField("Authenticated", BeTrue()),
		HaveField("Allowed", BeFalse()),
		HaveField("User", Equal(user)),
	)
}
