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
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// ImageRule maps container images to a local binary: every image whose
// reference contains Match (a substring, e.g. "research-agent") runs Binary.
// The binary stands for the image's entrypoint.
type ImageRule struct {
	// Match is a substring of the image reference (registry/name:tag).
	Match string `json:"match"`
	// Binary is the path of the local executable.
	Binary string `json:"binary"`
}

// ImageMap is an ordered list of rules; the first rule that matches wins.
type ImageMap []ImageRule

// Resolve returns the binary for image, or an error naming the image.
func (m ImageMap) Resolve(image string) (string, error) {
	for _, r := range m {
		if r.Match != "" && strings.Contains(image, r.Match) {
			return r.Binary, nil
		}
	}
	return "", fmt.Errorf("no local binary for image %q: map one with --image=SUBSTRING=PATH or an image map file", image)
}

// String renders the map as SUBSTRING=PATH pairs.
func (m ImageMap) String() string {
	parts := make([]string, 0, len(m))
	for _, r := range m {
		parts = append(parts, r.Match+"="+r.Binary)
	}
	return strings.Join(parts, ",")
}

// ParseImageRule parses SUBSTRING=PATH. A relative PATH is made absolute.
func ParseImageRule(s string) (ImageRule, error) {
	match, bin, ok := strings.Cut(s, "=")
	if !ok || match == "" || bin == "" {
		return ImageRule{}, fmt.Errorf("image rule %q: want SUBSTRING=PATH", s)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return ImageRule{}, err
	}
	return ImageRule{Match: match, Binary: abs}, nil
}

// LoadImageMap reads a YAML or JSON file of the form
//
//	images:
//	- {match: research-agent, binary: ./bin/dev/research-agent}
//
// Relative binaries are resolved against the file's directory.
func LoadImageMap(path string) (ImageMap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Images ImageMap `json:"images"`
	}
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("image map %s: %w", path, err)
	}
	for i, r := range f.Images {
		if r.Match == "" || r.Binary == "" {
			return nil, fmt.Errorf("image map %s: rule %d needs match and binary", path, i)
		}
		if !filepath.IsAbs(r.Binary) {
			f.Images[i].Binary = filepath.Join(filepath.Dir(path), r.Binary)
		}
	}
	return f.Images, nil
}
