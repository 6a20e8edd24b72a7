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
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/test/utils"
	// +kubebuilder:scaffold:imports
)

// The user stories of the termination owner run against a real kube-apiserver
// and etcd with the real reconcilers; the tests play kubelet (pod phases) and
// agent (RunAttempt status). Assertions read through a direct, uncached client.

// Shared timeouts for Eventually/Consistently.
const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.WithWatch
	scheme    = runtime.NewScheme()
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())

	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	// +kubebuilder:scaffold:scheme

	By("bootstrapping test environment")
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: utils.EnvtestAssets(),
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Every third status write of the operator fails with a conflict, as
		// it would under contention: every story also proves the reconcilers
		// lose no fact and never double-act when a write is refused.
		NewClient: func(config *rest.Config, options client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(config, options)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, conflictEveryThirdStatusWrite()), nil
		},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(SetupIndexes(ctx, mgr.GetFieldIndexer())).To(Succeed())
	Expect((&RuntimePolicyReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr)).To(Succeed())
	Expect((&SessionReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr)).To(Succeed())
	Expect((&ResearchRunReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Clock: clock.RealClock{}, MaxConcurrentReconciles: 4,
		// Progress-only status writes are paced as in production, at 1s
		// instead of 5s so the stories wait less for a reported step.
		ProgressWriteInterval: time.Second,
		// As --attempt-network-policy (the default) installs it.
		AttemptEgress: AttemptEgressPolicy("agentrun-system"),
	}).SetupWithManager(mgr)).To(Succeed())

	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

// conflictEveryThirdStatusWrite injects a Conflict into every third status
// update or patch.
func conflictEveryThirdStatusWrite() interceptor.Funcs {
	var n atomic.Int64
	conflict := func(obj client.Object) error {
		if n.Add(1)%3 != 0 {
			return nil
		}
		injectedConflicts.Add(1)
		gvk, _ := apiutil.GVKForObject(obj, scheme)
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(),
			errors.New("injected by the test"))
	}
	return interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if sub == "status" {
				if err := conflict(obj); err != nil {
					return err
				}
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if sub == "status" {
				if err := conflict(obj); err != nil {
					return err
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// injectedConflicts counts the conflicts the operator's client was given.
var injectedConflicts atomic.Int64

var _ = AfterSuite(func() {
	Expect(injectedConflicts.Load()).To(BeNumerically(">", 0), "the conflict injection never fired")
	counted := 0.0
	for _, resource := range []string{"researchruns", "sessions", "runtimepolicies"} {
		m := &dto.Metric{}
		Expect(conflicts.WithLabelValues(resource).Write(m)).To(Succeed())
		counted += m.GetCounter().GetValue()
	}
	Expect(counted).To(BeNumerically(">=", injectedConflicts.Load()),
		"an injected conflict was not counted in agentrun_controller_conflicts_total")
	By("tearing down the test environment")
	cancel()
	Expect(testEnv.Stop()).To(Succeed())
})
