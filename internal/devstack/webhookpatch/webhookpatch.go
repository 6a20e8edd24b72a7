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

// Package webhookpatch gives the webhook configurations envtest installs what
// `kustomize build config/default` gives a cluster's. envtest installs
// config/webhook/manifests.yaml, which controller-gen generates from the
// +kubebuilder:webhook markers; the rest (the namespaceSelector, the
// ResearchRun webhooks' matchConditions) is in the patches of
// config/webhook/kustomization.yaml. Apply sends those same patches to the API
// server, so the dev stack, the e2e suite and the admission suite run the
// webhooks a cluster runs.
package webhookpatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Patch is one entry of a kustomization's patches: an RFC 6902 JSON patch
// and the objects it targets.
type Patch struct {
	// Path is the patch file, relative to the kustomization.
	Path string `json:"path,omitempty"`
	// Patch is an inline patch (instead of Path).
	Patch  string `json:"patch,omitempty"`
	Target Target `json:"target"`
}

// Target selects the objects a patch applies to. Only kind and name are
// supported here; any other selector is refused rather than ignored.
type Target struct {
	Kind               string `json:"kind"`
	Name               string `json:"name,omitempty"`
	Group              string `json:"group,omitempty"`
	Version            string `json:"version,omitempty"`
	Namespace          string `json:"namespace,omitempty"`
	LabelSelector      string `json:"labelSelector,omitempty"`
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// Object is a webhook configuration a patch applies to.
type Object struct {
	APIVersion, Kind, Name string
	// Patch is the JSON patch (a JSON array of operations).
	Patch []byte
	// Source names the patch, for errors.
	Source string
}

// Plan reads the kustomization in dir (config/webhook) and returns, in
// order, each patch paired with each webhook configuration of the
// kustomization's resources it targets.
func Plan(dir string) ([]Object, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		APIVersion string   `json:"apiVersion,omitempty"`
		Kind       string   `json:"kind,omitempty"`
		Resources  []string `json:"resources"`
		Patches    []Patch  `json:"patches"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			return nil, err
		}
		for doc := range strings.SplitSeq("\n"+string(data), "\n---") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", r, err)
			}
			if strings.HasSuffix(u.GetKind(), "WebhookConfiguration") {
				objs = append(objs, u)
			}
		}
	}
	var plan []Object
	for _, p := range k.Patches {
		t := p.Target
		if t.Kind == "" || t.Group != "" || t.Version != "" || t.Namespace != "" || t.LabelSelector != "" || t.AnnotationSelector != "" {
			return nil, fmt.Errorf("%s/kustomization.yaml: patch %q: only a target kind (and name) is supported", dir, p.Path)
		}
		body, source := []byte(p.Patch), "an inline patch"
		if p.Path != "" {
			if body, err = os.ReadFile(filepath.Join(dir, p.Path)); err != nil {
				return nil, err
			}
			source = p.Path
		}
		ops, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if !bytes.HasPrefix(bytes.TrimSpace(ops), []byte("[")) {
			return nil, fmt.Errorf("%s: not an RFC 6902 JSON patch (a list of operations)", source)
		}
		matched := false
		for _, u := range objs {
			if u.GetKind() != t.Kind || (t.Name != "" && u.GetName() != t.Name) {
				continue
			}
			matched = true
			plan = append(plan, Object{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), Patch: ops, Source: source})
		}
		if !matched {
			return nil, fmt.Errorf("%s: no %s %s in %v", source, t.Kind, t.Name, k.Resources)
		}
	}
	return plan, nil
}

// Apply patches the webhook configurations of the kustomization in dir
// (config/webhook) as installed (by envtest, under their names in
// manifests.yaml), through the API server: a patch's "test" operation that
// fails (the webhook at an index is not the one the patch means) fails Apply.
func Apply(ctx context.Context, c client.Client, dir string) error {
	plan, err := Plan(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range plan {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(o.APIVersion)
		u.SetKind(o.Kind)
		u.SetName(o.Name)
		if err := c.Patch(ctx, u, client.RawPatch(types.JSONPatchType, o.Patch)); err != nil {
			errs = append(errs, fmt.Errorf("applying %s to %s %s: %w", o.Source, o.Kind, o.Name, err))
		}
	}
	return errors.Join(errs...)
}
