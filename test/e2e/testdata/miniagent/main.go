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

// miniagent is the smallest agent that completes a run, written against the
// raw API (not pkg/agent) so the local stack can be tested on its own: it
// reports one model request and a finish, publishes one section into its
// run's report ConfigMap once Finalizing, settles Complete and exits 0 when
// the run is Terminated. With --hang it only heartbeats until killed.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

func main() {
	// Flags meant for the reference agent (--provider, --script...) are
	// accepted and ignored.
	if err := run(slices.Contains(os.Args[1:], "--hang")); err != nil {
		fmt.Println("miniagent:", err)
		os.Exit(1)
	}
}

func run(hang bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ns, name := os.Getenv(v1.EnvNamespace), os.Getenv(v1.EnvRunAttempt)
	fmt.Printf("miniagent: attempt %s/%s pod %s uid %s kubeconfig %s\n", ns, name,
		os.Getenv("POD_NAME"), os.Getenv("POD_UID"), os.Getenv("AGENTRUN_KUBECONFIG"))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("AGENTRUN_KUBECONFIG"))
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	update := func(f func(*v1.RunAttemptStatus)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ra := &v1.RunAttempt{}
			if err := c.Get(ctx, key, ra); err != nil {
				return err
			}
			f(&ra.Status)
			now := metav1.Now()
			ra.Status.HeartbeatTime = &now
			return c.Status().Update(ctx, ra)
		})
	}
	get := func() (*v1.RunAttempt, error) {
		ra := &v1.RunAttempt{}
		return ra, c.Get(ctx, key, ra)
	}
	waitPhase := func(phases ...v1.Phase) (*v1.RunAttempt, error) {
		for {
			ra, err := get()
			if err != nil {
				return nil, err
			}
			for _, p := range phases {
				if ra.Spec.RunPhase == p {
					return ra, nil
				}
			}
			if err := update(func(*v1.RunAttemptStatus) {}); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	if hang {
		_, err := waitPhase(v1.PhaseTerminated)
		return err
	}
	if _, err := waitPhase(v1.PhaseRunning); err != nil {
		return err
	}
	fmt.Println("miniagent: one model request, then finish")
	if err := update(func(s *v1.RunAttemptStatus) {
		s.Usage.ModelRequests = 1
		s.Steps, s.LastProgressStep = 1, 1
		s.FinishProposed = true
	}); err != nil {
		return fmt.Errorf("reporting facts: %w", err)
	}
	ra, err := waitPhase(v1.PhaseFinalizing, v1.PhaseTerminated)
	if err != nil {
		return err
	}
	if ra.Spec.RunPhase == v1.PhaseFinalizing {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ra.Spec.RunName + "-report",
				Labels: map[string]string{v1.LabelRun: ra.Spec.RunName}},
			Data: map[string]string{"01-summary.md": "# Summary\n\nminiagent was here.\n"},
		}
		if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("publishing: %w", err)
		}
		fmt.Println("miniagent: published configmap/" + cm.Name)
		if err := update(func(s *v1.RunAttemptStatus) {
			s.Publication = v1.Publication{BlocksPlanned: 1, BlocksCommitted: 1, Settled: true,
				Settlement: v1.SettlementComplete, Location: "configmap/" + cm.Name}
		}); err != nil {
			return fmt.Errorf("settling: %w", err)
		}
	}
	// Exit once settled: the run ends after the pod has stopped.
	fmt.Println("miniagent: done")
	return nil
}
