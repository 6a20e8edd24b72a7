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

package v1alpha1

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/controller"
	"github.com/agentrun-dev/agentrun/internal/devstack/webhookpatch"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/test/utils"
	// +kubebuilder:scaffold:imports
)

// This suite proves admission and authority against a real API server: the
// webhooks are served for real by the manager's webhook server, the
// ValidatingAdmissionPolicies of config/admission-policy are installed, the
// operator runs under its own service-account identity, and attempt pods
// write with real pod-bound tokens.

const (
	timeout      = 20 * time.Second
	interval     = 50 * time.Millisecond
	operatorUser = "system:serviceaccount:agentrun-system:agentrun-controller-manager"
	gatewayUser  = "system:serviceaccount:agentrun-system:agentrun-gateway"
)

var (
	ctx         context.Context
	cancel      context.CancelFunc
	testEnv     *envtest.Environment
	adminConfig *rest.Config
	admin       client.Client // system:masters, not the operator
	scheme      = runtime.NewScheme()
	// gatewayURL is agentrun-gateway, in-process under its own identity
	// (RBAC from config/gateway/rbac), checking pod tokens with TokenReview;
	// upstreamURL is the scripted upstream its models point at.
	gatewayURL  string
	upstreamURL string
)

func TestAdmission(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Admission and Authority Suite")
}

// applyFile creates every object of a multi-document YAML file.
func applyFile(c client.Client, path string, mutate func(*unstructured.Unstructured)) {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	for doc := range strings.SplitSeq(string(data), "\n---") {
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
		if len(u.Object) == 0 {
			continue
		}
		if mutate != nil {
			mutate(u)
		}
		Expect(c.Create(ctx, u)).To(Succeed(), "creating %s %s from %s", u.GetKind(), u.GetName(), path)
	}
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	// +kubebuilder:scaffold:scheme

	root := utils.ProjectRoot()
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: utils.EnvtestAssets(),
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook", "manifests.yaml")},
		},
	}
	var err error
	adminConfig, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	admin, err = client.New(adminConfig, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	By("patching the webhooks as config/webhook's kustomization does (namespaceSelector, matchConditions)")
	Expect(webhookpatch.Apply(ctx, admin, filepath.Join(root, "config", "webhook"))).To(Succeed())

	By("installing the admission policies and the runner role from config/")
	applyFile(admin, filepath.Join(root, "config", "admission-policy", "runattempt_authority.yaml"), func(u *unstructured.Unstructured) {
		// The default kustomization prefixes names with "agentrun-".
		u.SetName("agentrun-" + u.GetName())
		if pn, ok, _ := unstructured.NestedString(u.Object, "spec", "policyName"); ok {
			Expect(unstructured.SetNestedField(u.Object, "agentrun-"+pn, "spec", "policyName")).To(Succeed())
		}
	})
	for _, f := range []string{"role.yaml", "role_binding.yaml"} {
		applyFile(admin, filepath.Join(root, "config", "gateway", "rbac", f), func(u *unstructured.Unstructured) {
			u.SetName("agentrun-" + u.GetName())
			if u.GetNamespace() != "" {
				u.SetNamespace("agentrun-system")
			}
			if u.GetKind() == "ClusterRoleBinding" {
				Expect(unstructured.SetNestedField(u.Object, "agentrun-gateway", "roleRef", "name")).To(Succeed())
				Expect(unstructured.SetNestedSlice(u.Object, []any{map[string]any{
					"kind": "ServiceAccount", "name": "agentrun-gateway", "namespace": "agentrun-system"}}, "subjects")).To(Succeed())
			}
		})
	}
	applyFile(admin, filepath.Join(root, "config", "rbac", "role.yaml"), func(u *unstructured.Unstructured) {
		u.SetName("agentrun-" + u.GetName())
	})
	Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agentrun-manager-rolebinding"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "agentrun-system", Name: "agentrun-controller-manager"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "agentrun-manager-role"},
	})).To(Succeed())

	By("starting the operator under its own identity, with RBAC from config/rbac")
	operator, err := testEnv.AddUser(envtest.User{Name: operatorUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}, adminConfig)
	Expect(err).NotTo(HaveOccurred())
	wio := &testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(operator.Config(), ctrl.Options{
		Scheme: scheme,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(controller.SetupIndexes(ctx, mgr.GetFieldIndexer())).To(Succeed())
	Expect(SetupRuntimePolicyWebhookWithManager(mgr)).To(Succeed())
	Expect(SetupSessionWebhookWithManager(mgr)).To(Succeed())
	Expect(SetupResearchRunWebhookWithManager(mgr)).To(Succeed())
	// +kubebuilder:scaffold:webhook
	Expect((&controller.RuntimePolicyReconciler{Client: mgr.GetClient(), Scheme: scheme}).SetupWithManager(mgr)).To(Succeed())
	Expect((&controller.SessionReconciler{Client: mgr.GetClient(), Scheme: scheme}).SetupWithManager(mgr)).To(Succeed())
	Expect((&controller.ResearchRunReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Clock: clock.RealClock{},
	}).SetupWithManager(mgr)).To(Succeed())

	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()

	By("starting agentrun-gateway under its own identity, and the scripted upstream")
	up := httptest.NewServer(&upstream.Server{})
	DeferCleanup(up.Close)
	upstreamURL = up.URL + "/v1"
	gwUser, err := testEnv.AddUser(envtest.User{Name: gatewayUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}, adminConfig)
	Expect(err).NotTo(HaveOccurred())
	gwClient, err := client.New(gwUser.Config(), client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	gw, err := gateway.New(gateway.Options{
		Client:        gwClient,
		Authenticator: &gateway.TokenReviewer{Client: gwClient},
		FlushInterval: 100 * time.Millisecond,
		PollInterval:  100 * time.Millisecond,
	})
	Expect(err).NotTo(HaveOccurred())
	gwServer := httptest.NewServer(gw.Handler())
	DeferCleanup(func() {
		gwServer.CloseClientConnections()
		gwServer.Close()
		_ = gw.Shutdown(context.Background())
	})
	gatewayURL = gwServer.URL

	dialer := &net.Dialer{Timeout: time.Second}
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	Eventually(func() error {
		conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err
		}
		return conn.Close()
	}, timeout, interval).Should(Succeed())
	// The webhooks read through the manager's cache; wait until it serves.
	Eventually(func() error {
		return mgr.GetClient().List(ctx, &v1alpha1.RuntimePolicyList{})
	}, timeout, interval).Should(Succeed())
})

var _ = AfterSuite(func() {
	cancel()
	Expect(testEnv.Stop()).To(Succeed())
})
