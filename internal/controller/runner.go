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
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultRunnerClusterRole is the ClusterRole attempt pods are bound to
// (config/rbac/runner_role.yaml, named agentrun-runner once installed).
const DefaultRunnerClusterRole = "agentrun-runner"

// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=agentrun-runner

// runners makes sure the runner service account exists in a namespace and is
// bound to the runner ClusterRole, once per namespace and account per process.
type runners struct {
	clusterRole string
	mu          sync.Mutex
	ready       map[string]bool
}

func (r *runners) ensure(ctx context.Context, c client.Client, reader client.Reader, namespace, sa string) error {
	key := namespace + "/" + sa
	r.mu.Lock()
	done := r.ready[key]
	r.mu.Unlock()
	if done {
		return nil
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "agentrun"}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa, Labels: labels}}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(account), &corev1.ServiceAccount{}); apierrors.IsNotFound(err) {
		if err := c.Create(ctx, account); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else if err != nil {
		return err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa, Labels: labels},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.clusterRole},
	}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(binding), &rbacv1.RoleBinding{}); apierrors.IsNotFound(err) {
		if err := c.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else if err != nil {
		return err
	}
	r.mu.Lock()
	r.ready[key] = true
	r.mu.Unlock()
	return nil
}
