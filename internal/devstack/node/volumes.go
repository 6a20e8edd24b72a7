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
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Volumes of local pods. A container is a host process, so a volume is a
// directory under the pod's directory and a mount path is where the process
// finds it: every env value, argument and command word that starts with a
// container's mount path is rewritten to the volume's directory (a process
// cannot see /var/run/secrets/...). Supported: configMap, secret, and
// projected with serviceAccountToken (a TokenRequest bound to the pod, for
// the source's audience, refreshed at 80% of its life as a kubelet does),
// configMap and secret sources. Other volume types are ignored.

// mountMap maps a container's mount paths to local directories, longest first.
type mountMap [][2]string

// rewrite maps s when it starts with a mount path.
func (m mountMap) rewrite(s string) string {
	for _, mp := range m {
		if s == mp[0] || strings.HasPrefix(s, mp[0]+"/") {
			return mp[1] + strings.TrimPrefix(s, mp[0])
		}
		// --flag=/mount/path/...
		if i := strings.Index(s, "="+mp[0]); i >= 0 {
			rest := s[i+1:]
			if rest == mp[0] || strings.HasPrefix(rest, mp[0]+"/") {
				return s[:i+1] + mp[1] + strings.TrimPrefix(rest, mp[0])
			}
		}
	}
	return s
}

// prepareVolumes writes the pod's volumes under dir/volumes and keeps its
// projected tokens fresh until ctx ends. It returns each volume's directory.
func (n *Node) prepareVolumes(ctx context.Context, pod *corev1.Pod, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		switch {
		case v.ConfigMap != nil, v.Secret != nil, v.Projected != nil:
			// Volumes with content: a process finds them at their mount
			// paths, rewritten. An emptyDir is not rewritten: the process
			// has TMPDIR, and its mount path (often /tmp) is a real host
			// path other arguments may name.
			out[v.Name] = vdir
		}
		switch {
		case v.ConfigMap != nil:
			if err := n.writeConfigMap(ctx, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, vdir,
				v.ConfigMap.Optional != nil && *v.ConfigMap.Optional); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Secret != nil:
			if err := n.writeSecret(ctx, pod.Namespace, v.Secret.SecretName, v.Secret.Items, vdir,
				v.Secret.Optional != nil && *v.Secret.Optional); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				var err error
				switch {
				case src.ServiceAccountToken != nil:
					err = n.projectToken(ctx, pod, src.ServiceAccountToken, vdir)
				case src.ConfigMap != nil:
					err = n.writeConfigMap(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, vdir,
						src.ConfigMap.Optional != nil && *src.ConfigMap.Optional)
				case src.Secret != nil:
					err = n.writeSecret(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, vdir,
						src.Secret.Optional != nil && *src.Secret.Optional)
				}
				if err != nil {
					return nil, fmt.Errorf("volume %s: %w", v.Name, err)
				}
			}
		}
	}
	return out, nil
}

// mounts returns container c's mount paths mapped to volume directories.
func mounts(c *corev1.Container, volumes map[string]string) mountMap {
	var m mountMap
	for _, vm := range c.VolumeMounts {
		d, ok := volumes[vm.Name]
		if !ok {
			continue
		}
		if vm.SubPath != "" {
			d = filepath.Join(d, vm.SubPath)
		}
		m = append(m, [2]string{path.Clean(vm.MountPath), d})
	}
	slices.SortStableFunc(m, func(a, b [2]string) int { return len(b[0]) - len(a[0]) })
	return m
}

func writeItems(data map[string][]byte, items []corev1.KeyToPath, dir string) error {
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("no key %q", it.Key)
		}
		p := filepath.Join(dir, filepath.Clean("/"+it.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(p, v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) writeConfigMap(ctx context.Context, ns, name string, items []corev1.KeyToPath, dir string, optional bool) error {
	cm, err := n.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("ConfigMap %s/%s: %w", ns, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return writeItems(data, items, dir)
}

func (n *Node) writeSecret(ctx context.Context, ns, name string, items []corev1.KeyToPath, dir string, optional bool) error {
	s, err := n.cfg.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional {
			return nil
		}
		return fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	return writeItems(s.Data, items, dir)
}

// projectToken writes a token for the pod's service account, bound to the
// pod, for the source's audience, and refreshes it at 80% of its life.
func (n *Node) projectToken(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, dir string) error {
	p := filepath.Join(dir, filepath.Clean("/"+src.Path))
	ttl := int64(n.cfg.TokenTTL / time.Second)
	if src.ExpirationSeconds != nil && *src.ExpirationSeconds > 0 {
		ttl = *src.ExpirationSeconds
	}
	issue := func() (time.Time, error) {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &ttl,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}
		if src.Audience != "" {
			req.Spec.Audiences = []string{src.Audience}
		}
		var tr *authenticationv1.TokenRequest
		var err error
		for range 20 { // the service account may lag behind the pod by a moment
			tr, err = n.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("token for %s/%s (audience %q) bound to pod %s: %w",
				pod.Namespace, pod.Spec.ServiceAccountName, src.Audience, pod.Name, err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return time.Time{}, err
		}
		return tr.Status.ExpirationTimestamp.Time, writeFileAtomic(p, []byte(tr.Status.Token), 0o400) // read-only, as projected
	}
	exp, err := issue()
	if err != nil {
		return err
	}
	go func() {
		for {
			wait := max(time.Until(exp)*8/10, time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			e, err := issue()
			if err != nil {
				if ctx.Err() == nil {
					n.log.Error(err, "refreshing projected token", "pod", pod.Namespace+"/"+pod.Name)
				}
				exp = time.Now().Add(5 * time.Second)
				continue
			}
			exp = e
		}
	}()
	return nil
}
