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

package stack

// The stack's control plane on its own (no operator, gateway or node):
// kube-controller-manager collects owned objects and empties deleted
// namespaces, and Stop leaves nothing in the system's temporary directory.
// Needs KUBEBUILDER_ASSETS with kube-controller-manager
// (WITH_CONTROLLER_MANAGER=1 hack/envtest-toolchain.sh):
//
//	go test ./internal/devstack/stack/ -run ControlPlane -count=1 -v

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// controlPlane starts etcd, kube-apiserver and, unless noKCM,
// kube-controller-manager as Start does, with the system's temporary
// directory pointed at tmp.
func controlPlane(t *testing.T, tmp string, noKCM bool) (*Stack, kubernetes.Interface) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if !hasToolchain(assets) {
		t.Skip("KUBEBUILDER_ASSETS lacks kube-apiserver, etcd, kubectl or kube-controller-manager; " +
			"run WITH_CONTROLLER_MANAGER=1 hack/envtest-toolchain.sh")
	}
	dir := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{opts: Options{Root: root, Assets: assets, Dir: dir, DisableControllerManager: noKCM}, LogDir: filepath.Join(dir, "logs")}
	t.Cleanup(s.Stop)
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shim, err := prepareShim(filepath.Join(dir, "shim"), assets)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.startControlPlane(shim); err != nil {
		t.Fatal(err)
	}
	if !noKCM {
		if err := s.startControllerManager(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(s.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return s, cs
}

func TestControlPlaneStopLeavesNoTemporaryDirectory(t *testing.T) {
	tmp := t.TempDir()
	s, _ := controlPlane(t, tmp, true)
	certDir := s.Env.WebhookInstallOptions.LocalServingCertDir
	if fi, err := os.Stat(filepath.Join(certDir, "tls.crt")); err != nil || fi.Size() == 0 {
		t.Fatalf("no webhook serving certificate in %s: %v", certDir, err)
	}
	if filepath.Dir(certDir) != tmp {
		t.Fatalf("the certificate directory %s is not in the test's temporary directory %s", certDir, tmp)
	}
	s.Stop()
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in the temporary directory after Stop: %s", e.Name())
	}
}

func TestControlPlaneCollectsGarbageAndNamespaces(t *testing.T) {
	_, cs := controlPlane(t, t.TempDir(), false)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-"}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(ns.Name)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: new(true),
	}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, 60*time.Second, "ConfigMap dependent (owned by a deleted ConfigMap)", func() error {
		_, err := cms.Get(ctx, "dependent", metav1.GetOptions{})
		return err
	})
	t.Logf("the garbage collector deleted the dependent %s after its owner", time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, 60*time.Second, "Namespace "+ns.Name, func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		return err
	})
	t.Logf("the namespace controller emptied and removed the namespace in %s", time.Since(start).Round(100*time.Millisecond))
}

// waitGone waits until get answers NotFound.
func waitGone(t *testing.T, within time.Duration, what string, get func() error) {
	t.Helper()
	gomega.NewWithT(t).Eventually(func() bool { return apierrors.IsNotFound(get()) }).
		WithTimeout(within).WithPolling(100*time.Millisecond).Should(gomega.BeTrue(), "%s is still there after %s", what, within)
}
