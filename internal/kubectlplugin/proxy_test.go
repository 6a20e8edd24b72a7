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
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hostIP is an address of this machine the API server's service proxy
// dials (it refuses loopback and link-local endpoints).
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address for the service proxy to dial")
	return ""
}

// streamBehindProxy installs Service agentrun-stream in agentrun-system
// with an endpoint (and its pod) at a TLS server on this machine, as the
// API server's service proxy needs it, and a service account "viewer" in
// team-a that may use the proxy. It returns the viewer's rest.Config.
func streamBehindProxy(t *testing.T, ip string, port int) *rest.Config {
	return installStream(t, ip, port, StreamNamespace, StreamService, nil, "viewer")
}

// installStream is streamBehindProxy for Service ns/name with labels, and
// service account viewer in team-a.
func installStream(t *testing.T, ip string, port int, ns, name string, labels map[string]string, viewer string) *rest.Config {
	t.Helper()
	cluster(t)
	quiet := rest.CopyConfig(envCfg)
	quiet.WarningHandler = rest.NoWarnings{}
	kc := kubernetes.NewForConfigOrDie(quiet)
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}))
	must(kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))},
			{Name: "nats", Port: 4222}}}}, metav1.CreateOptions{}))
	pod, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "stream", Image: "agentrun-stream"}}}},
		metav1.CreateOptions{})
	must(pod, err)
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	must(kc.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}))
	ref := &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}
	ready, portName, p := true, "https", int32(port)
	must(kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, TargetRef: ref,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &p}}}, metav1.CreateOptions{}))

	must(kc.CoreV1().ServiceAccounts(teamA).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: viewer}}, metav1.CreateOptions{}))
	must(kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "stream-proxy"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services/proxy"},
			ResourceNames: []string{"https:" + name + ":443"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}))
	must(kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: viewer},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stream-proxy"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: teamA, Name: viewer}}}, metav1.CreateOptions{}))
	tr, err := kc.CoreV1().ServiceAccounts(teamA).CreateToken(ctx, viewer, &authenticationv1.TokenRequest{},
		metav1.CreateOptions{})
	must(tr, err)
	cfg := rest.AnonymousClientConfig(envCfg)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// TestEventsThroughServiceProxy runs `events` the default way: through the
// API server's service proxy to Service agentrun-stream, as a service
// account with a bearer token. The export and a followed SSE stream come
// through; the token does not — the API server consumes the Authorization
// header — so a stream server that checks it answers 401, and the error
// says how to connect directly instead.
func TestEventsThroughServiceProxy(t *testing.T) {
	fixtureTeamA(t)
	ip := hostIP(t)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skip(err)
	}
	f := newFakeStream(t, teamA, "survey-vector-dbs")
	srv := httptest.NewUnstartedServer(f)
	srv.Listener = l
	srv.StartTLS()
	defer srv.Close()
	viewer := streamBehindProxy(t, ip, l.Addr().(*net.TCPAddr).Port)
	factory := func() *testFactory { return &testFactory{c: k8s, cfg: viewer} }

	loc, err := FindStream(context.Background(), k8s, "", "")
	if err != nil {
		t.Fatal(err)
	}
	url, err := StreamProxyURL(viewer, loc, teamA, "survey-vector-dbs")
	if err != nil {
		t.Fatal(err)
	}
	wantURL := strings.TrimSuffix(viewer.Host, "/") + "/api/v1/namespaces/agentrun-system/services/" +
		"https:agentrun-stream:443/proxy/apis/stream.agentrun.dev/v1/namespaces/team-a/researchruns/survey-vector-dbs/events"
	if url != wantURL {
		t.Errorf("proxy URL: %s\nwant %s", url, wantURL)
	}

	out, _, err := run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "events.txt", out)
	out, _, err = run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs", "-f", "--from", "18")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\n"); n != 4 || !strings.Contains(out, "RUN_FINISHED") {
		t.Errorf("-f --from 18 through the proxy: %d lines\n%s", n, out)
	}
	f.mu.Lock()
	seen := append([]string(nil), f.auth...)
	asked := append([]string(nil), f.asked...)
	f.mu.Unlock()
	for _, a := range seen {
		if a != "" {
			t.Errorf("the stream server saw an Authorization header through the proxy: %q", a)
		}
	}
	if len(asked) != 1 || asked[0] != "Last-Event-ID: 17" {
		t.Errorf("Last-Event-ID through the proxy: %v", asked)
	}

	f.token = "anything"
	_, _, err = run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs")
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") ||
		!strings.Contains(err.Error(), "removes its Authorization header") {
		t.Errorf("through the proxy to a server that checks tokens: %v", err)
	}

	// A cluster without agentrun-stream.
	var svc corev1.Service
	key := client.ObjectKey{Namespace: StreamNamespace, Name: StreamService}
	if err := k8s.Get(context.Background(), key, &svc); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), &svc); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs")
	if err == nil || !strings.Contains(err.Error(), "service agentrun-system/agentrun-stream not found") {
		t.Errorf("without the Service: %v", err)
	}
}

// TestEventsRenamedInstall runs `events` against a stream installed under
// another namespace and name (the chart's research-ops with namePrefix
// ar-): without flags the plugin finds the Service by its label
// app.kubernetes.io/name=agentrun-stream; --stream-namespace finds it by
// that label there; --stream-namespace and --stream-service name it; and
// two labelled Services without flags are an error naming both.
func TestEventsRenamedInstall(t *testing.T) {
	fixtureTeamA(t)
	ip := hostIP(t)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skip(err)
	}
	f := newFakeStream(t, teamA, "survey-vector-dbs")
	srv := httptest.NewUnstartedServer(f)
	srv.Listener = l
	srv.StartTLS()
	defer srv.Close()
	const ns, name = "research-ops", "ar-stream"
	labels := map[string]string{StreamLabel: StreamLabelValue}
	viewer := installStream(t, ip, l.Addr().(*net.TCPAddr).Port, ns, name, labels, "viewer-ops")
	ctx := context.Background()
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	})
	var svc corev1.Service
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: StreamNamespace, Name: StreamService}, &svc); err == nil {
		t.Fatalf("%s/%s exists: this test needs a cluster without the default install", StreamNamespace, StreamService)
	}

	want := StreamLocation{Namespace: ns, Service: name, Port: 443}
	for _, flags := range [][2]string{{"", ""}, {ns, ""}, {ns, name}} {
		loc, err := FindStream(ctx, k8s, flags[0], flags[1])
		if err != nil || loc != want {
			t.Errorf("FindStream(%q, %q) = %+v, %v; want %+v", flags[0], flags[1], loc, err, want)
		}
	}
	url, err := StreamProxyURL(viewer, want, teamA, "survey-vector-dbs")
	if err != nil {
		t.Fatal(err)
	}
	if wantURL := strings.TrimSuffix(viewer.Host, "/") + "/api/v1/namespaces/research-ops/services/" +
		"https:ar-stream:443/proxy/apis/stream.agentrun.dev/v1/namespaces/team-a/researchruns/survey-vector-dbs/events"; url != wantURL {
		t.Errorf("proxy URL: %s\nwant %s", url, wantURL)
	}
	factory := func() *testFactory { return &testFactory{c: k8s, cfg: viewer} }
	for _, args := range [][]string{nil, {"--stream-namespace", ns}, {"--stream-namespace", ns, "--stream-service", name}} {
		out, _, err := run(t, time.Now(), factory(), append([]string{"events", "-n", teamA, "survey-vector-dbs"}, args...)...)
		if err != nil {
			t.Fatalf("events %v: %v", args, err)
		}
		golden(t, "events.txt", out)
	}
	_, _, err = run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs", "--stream-service", name)
	if err == nil || !strings.Contains(err.Error(), "service agentrun-system/ar-stream not found") ||
		!strings.Contains(err.Error(), "--stream-namespace") {
		t.Errorf("--stream-service without its namespace: %v", err)
	}

	// A second labelled Service: the plugin does not guess.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "agentrun-stream", Labels: labels},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, other) })
	_, _, err = run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs")
	if err == nil || !strings.Contains(err.Error(), "2 services labelled app.kubernetes.io/name=agentrun-stream in any "+
		"namespace (research-ops/ar-stream, team-a/agentrun-stream)") {
		t.Errorf("two labelled Services: %v", err)
	}
	if _, _, err := run(t, time.Now(), factory(), "events", "-n", teamA, "survey-vector-dbs",
		"--stream-namespace", ns); err != nil {
		t.Errorf("two labelled Services, --stream-namespace %s: %v", ns, err)
	}
}
