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

package kubectlplugin

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKrewManifest checks plugins/agentrun.yaml against the krew index
// format's rules (krew's validate-krew-manifest): the kind, a valid name,
// one platform per os/arch we release, each with a release-asset URI, a
// sha256 of 64 hex digits (a placeholder until the release workflow fills
// it) and the binary.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "plugins", "agentrun.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				Sha256 string `json:"sha256"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
				Bin string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" ||
		m.Metadata.Name != "agentrun" {
		t.Errorf("header: %s %s %s", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(m.Spec.Version) || m.Spec.ShortDescription == "" ||
		m.Spec.Description == "" || m.Spec.Homepage == "" {
		t.Errorf("spec: version %q, descriptions and homepage must be set", m.Spec.Version)
	}
	want := map[string]bool{"linux/amd64": true, "linux/arm64": true, "darwin/amd64": true, "darwin/arm64": true}
	for _, p := range m.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		if !want[key] {
			t.Errorf("unexpected or repeated platform %q", key)
		}
		delete(want, key)
		asset := "kubectl-agentrun_" + strings.ReplaceAll(key, "/", "_") + ".tar.gz"
		uri := "https://github.com/agentrun-dev/agentrun/releases/download/" + m.Spec.Version + "/" + asset
		if p.URI != uri {
			t.Errorf("%s: uri %s, want %s", key, p.URI, uri)
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.Sha256) {
			t.Errorf("%s: sha256 %q is not 64 hex digits", key, p.Sha256)
		}
		if p.Bin != "kubectl-agentrun" || len(p.Files) == 0 || p.Files[0].From != "kubectl-agentrun" {
			t.Errorf("%s: bin %q, files %v", key, p.Bin, p.Files)
		}
	}
	for key := range want {
		t.Errorf("platform %s missing", key)
	}
}
