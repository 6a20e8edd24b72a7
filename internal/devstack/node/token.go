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

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvKubeconfig is the env var that tells a local container where its
// kubeconfig is (pkg/agent reads it). A kubelet would mount the projected
// token at /var/run/secrets/kubernetes.io/serviceaccount instead.
const EnvKubeconfig = "AGENTRUN_KUBECONFIG"

// credentials is a pod's service-account identity on disk: a pod-bound token
// file, refreshed before it expires (as the kubelet refreshes a projected
// token), and a kubeconfig that reads it through tokenFile (client-go re-reads
// the file, so a refreshed token is picked up without a restart).
type credentials struct {
	kubeconfig string
	tokenPath  string
	expires    time.Time
}

// issueToken requests a token for the pod's service account, bound to the
// pod (name and UID), with the API server's default audience, and writes it
// atomically to path.
func (n *Node) issueToken(ctx context.Context, pod *corev1.Pod, path string) (time.Time, error) {
	sa := pod.Spec.ServiceAccountName
	ttl := int64(n.cfg.TokenTTL / time.Second)
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &ttl,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
			},
		},
	}
	var (
		tr  *authenticationv1.TokenRequest
		err error
	)
	// The service account may lag behind the pod by a moment.
	for range 20 {
		tr, err = n.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("token for service account %s/%s bound to pod %s: %w", pod.Namespace, sa, pod.Name, err)
	}
	if err := writeFileAtomic(path, []byte(tr.Status.Token), 0o600); err != nil {
		return time.Time{}, err
	}
	return tr.Status.ExpirationTimestamp.Time, nil
}

// podCredentials writes the pod's token and kubeconfig into dir and keeps the
// token fresh until ctx ends.
func (n *Node) podCredentials(ctx context.Context, pod *corev1.Pod, dir string) (*credentials, error) {
	c := &credentials{
		kubeconfig: filepath.Join(dir, "kubeconfig"),
		tokenPath:  filepath.Join(dir, "token"),
	}
	exp, err := n.issueToken(ctx, pod, c.tokenPath)
	if err != nil {
		return nil, err
	}
	c.expires = exp
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: n.cfg.APIServerURL, CertificateAuthorityData: n.cfg.CAData}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: c.tokenPath}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod", Namespace: pod.Namespace}
	kc.CurrentContext = "pod"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(c.kubeconfig, data, 0o600); err != nil {
		return nil, err
	}
	go n.refreshToken(ctx, pod, c)
	return c, nil
}

// refreshToken re-issues the token at 80% of its lifetime, as a kubelet does.
func (n *Node) refreshToken(ctx context.Context, pod *corev1.Pod, c *credentials) {
	for {
		wait := max(time.Until(c.expires)*8/10, time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		exp, err := n.issueToken(ctx, pod, c.tokenPath)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Error(err, "refreshing pod token", "pod", pod.Namespace+"/"+pod.Name)
			}
			c.expires = time.Now().Add(5 * time.Second) // retry soon
			continue
		}
		c.expires = exp
	}
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
