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

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/internal/stream/sse"
)

// The run-stream server's identity, as config/default deploys it.
const (
	StreamServiceAccount = "agentrun-stream"
	StreamUser           = "system:serviceaccount:" + OperatorNamespace + ":" + StreamServiceAccount
)

// startStream starts agentrun-stream on loopback with its embedded NATS
// server (a real JetStream file store in Dir/stream) accepting the gateway
// on a loopback port, when Options.StreamBinary is set.
func (s *Stack) startStream(ctx context.Context) error {
	if s.opts.StreamBinary == "" {
		return nil
	}
	_, kubeconfig, err := s.serviceAccountUser(StreamUser, "stream.kubeconfig")
	if err != nil {
		return err
	}
	ports, err := freeLoopbackPorts(4)
	if err != nil {
		return err
	}
	s.StreamURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	s.StreamNATSURL = fmt.Sprintf("nats://127.0.0.1:%d", ports[1])
	s.StreamMetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2])
	s.StreamStoreDir = filepath.Join(s.opts.Dir, "stream")
	s.Stream = &Operator{
		Binary: s.opts.StreamBinary,
		Args: []string{
			"--kubeconfig=" + kubeconfig,
			fmt.Sprintf("--listen=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("--nats-listen=127.0.0.1:%d", ports[1]),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[2]),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[3]),
			"--store-dir=" + s.StreamStoreDir,
		},
		Env:        []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig},
		LogPath:    filepath.Join(s.LogDir, "stream.log"),
		HealthAddr: fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	s.Stream.Args = append(s.Stream.Args, s.opts.StreamArgs...)
	_, _ = fmt.Fprintf(s.opts.out(), "==> starting agentrun-stream (%s) as %s on %s (NATS %s, store %s)\n",
		rel(s.opts.Root, s.opts.StreamBinary), StreamUser, s.StreamURL, s.StreamNATSURL, rel(s.opts.Root, s.StreamStoreDir))
	return s.StartStream(ctx)
}

// StartStream starts the stream process and waits until it is ready (again,
// after Stream.Stop or Stream.Kill: same addresses, same store).
func (s *Stack) StartStream(ctx context.Context) error {
	return s.startProcess(ctx, "agentrun-stream", s.Stream, 60*time.Second)
}

// ViewerToken returns a token of a service account allowed to get, list
// and watch the ResearchRuns of namespace (and nothing else): what the web
// page is opened with (…#token=…). It creates the account and its Role the
// first time.
func (s *Stack) ViewerToken(ctx context.Context, namespace, name string) (string, error) {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"agentrun.dev"}, Resources: []string{"researchruns"}, Verbs: []string{"get", "list", "watch"},
		}}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		},
	}
	for _, o := range objs {
		if err := s.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{sse.DefaultAudience}, ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := s.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("a token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
