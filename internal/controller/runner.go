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
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/internal/runpod"
)

// DefaultGatewayURL is where attempt pods reach agentrun-gateway when the
// operator is told nothing else (config/gateway's Service).
const DefaultGatewayURL = "https://agentrun-gateway.agentrun-system.svc:8443"

// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;create
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update

// runners makes sure a namespace with attempts has what attempt pods need:
// the runner service account (an identity for the pod's gateway token; it is
// bound to no role: attempt pods hold no API-server token and need no RBAC)
// and the gateway's CA bundle, once per namespace and account per process;
// and the attempt egress NetworkPolicy before every attempt's pod, read live:
// it lives in the tenant's namespace, where anyone with the built-in edit
// role may delete or widen it.
type runners struct {
	caConfigMap string
	ca          []byte
	// caFile, when set, is re-read (at most once a minute) so a rotated CA
	// reaches every namespace without an operator restart.
	caFile string
	caRead time.Time
	// egress, when set, is the NetworkPolicy kept in every namespace with
	// attempts: attempt pods may reach only the gateway and DNS.
	egress *networkingv1.NetworkPolicy
	mu     sync.Mutex
	ready  map[string]bool
}

func (r *runners) ensure(ctx context.Context, c client.Client, reader client.Reader, namespace, sa string) error {
	if r.egress != nil {
		if err := r.ensureEgress(ctx, c, reader, namespace); err != nil {
			return fmt.Errorf("keeping NetworkPolicy %s in %s: %w", r.egress.Name, namespace, err)
		}
	}
	key := namespace + "/" + sa
	r.mu.Lock()
	r.rereadCALocked()
	done := r.ready[key]
	r.mu.Unlock()
	if done {
		return nil
	}
	owned := runnerLabels()
	account := &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Namespace: namespace, Name: sa, Labels: owned},
		AutomountServiceAccountToken: new(false),
	}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(account), &corev1.ServiceAccount{}); apierrors.IsNotFound(err) {
		if err := c.Create(ctx, account); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else if err != nil {
		return err
	}
	if r.caConfigMap != "" && len(r.ca) > 0 {
		if err := r.ensureCA(ctx, c, reader, namespace, owned); err != nil {
			return fmt.Errorf("keeping the gateway CA in %s: %w", namespace, err)
		}
	}
	r.mu.Lock()
	r.ready[key] = true
	r.mu.Unlock()
	return nil
}

// rereadCALocked re-reads the CA file once a minute; a changed CA marks
// every namespace to be prepared again.
func (r *runners) rereadCALocked() {
	if r.caFile == "" || time.Since(r.caRead) < time.Minute {
		return
	}
	r.caRead = time.Now()
	data, err := os.ReadFile(r.caFile)
	if err != nil || len(data) == 0 || bytes.Equal(data, r.ca) {
		return
	}
	r.ca = data
	r.ready = map[string]bool{}
}

// ensureCA keeps the gateway's CA bundle in the namespace's CA ConfigMap.
func (r *runners) ensureCA(ctx context.Context, c client.Client, reader client.Reader, namespace string, owned map[string]string) error {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.caConfigMap}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: r.caConfigMap, Labels: owned},
			Data:       map[string]string{runpod.GatewayCAFile: string(r.ca)},
		}
		if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	case err != nil:
		return err
	case bytes.Equal([]byte(cm.Data[runpod.GatewayCAFile]), r.ca):
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[runpod.GatewayCAFile] = string(r.ca)
	return c.Update(ctx, cm)
}

// AttemptEgressPolicy is the NetworkPolicy that lets attempt pods reach only
// the gateway (pods labelled app.kubernetes.io/name=agentrun-gateway in
// gatewayNamespace, port 8443) and the cluster DNS.
func AttemptEgressPolicy(gatewayNamespace string) *networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	gw, dns := intstr.FromInt32(8443), intstr.FromInt32(53)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "agentrun-attempt-egress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				runpod.LabelManagedBy: runpod.ManagedBy, runpod.LabelName: runpod.AppName}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": gatewayNamespace}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{runpod.LabelName: "agentrun-gateway"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &gw}},
				},
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
			},
		},
	}
}

// runnerLabels are the labels of what runners keeps in a namespace.
func runnerLabels() map[string]string {
	return map[string]string{runpod.LabelManagedBy: runpod.ManagedBy}
}

// ensureEgress keeps the attempt egress NetworkPolicy in the namespace:
// created when missing (deleted by a tenant), its spec restored when changed.
func (r *runners) ensureEgress(ctx context.Context, c client.Client, reader client.Reader, namespace string) error {
	want := r.egress.DeepCopy()
	want.Namespace, want.Labels = namespace, runnerLabels()
	cur := &networkingv1.NetworkPolicy{}
	err := reader.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	case err != nil:
		return err
	case equality.Semantic.DeepEqual(cur.Spec, want.Spec):
		return nil
	}
	cur.Spec = want.Spec
	return c.Update(ctx, cur)
}

// ExtraEgressPolicies names the NetworkPolicies among policies, other than
// the one called ours, that select a pod labelled podLabels and allow it
// egress: NetworkPolicies add up, so each widens what the attempt egress
// policy leaves the pod. A policy that selects the pod with no egress rule
// only denies, and is not named.
func ExtraEgressPolicies(policies []networkingv1.NetworkPolicy, podLabels map[string]string, ours string) []string {
	var out []string
	for i := range policies {
		np := &policies[i]
		if np.Name == ours || len(np.Spec.Egress) == 0 {
			continue
		}
		egress := len(np.Spec.PolicyTypes) == 0 // the API server defaults it; Egress is implied by egress rules
		for _, t := range np.Spec.PolicyTypes {
			egress = egress || t == networkingv1.PolicyTypeEgress
		}
		if !egress {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		out = append(out, np.Name)
	}
	slices.Sort(out)
	return out
}
