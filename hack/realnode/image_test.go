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

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTar returns the regular files of a tar, by name, with their headers.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name], headers[h.Name] = data, h
	}
}

// An image as ctr imports it: an OCI layout whose index names the image, whose config carries
// the Dockerfile's USER and ENTRYPOINT, and whose one layer holds the nonroot base and the
// binaries, executable.
func TestWriteOCI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	im := image{base: baseNonroot, user: "65532:65532", workdir: "/", entrypoint: []string{"/agent"},
		env: []string{"HOME=/tmp"}, files: map[string]string{"/agent": bin}}
	var out bytes.Buffer
	if err := im.writeOCI(&out, "localhost/agentrun/agent:dev"); err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, &out)
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %s (%v)", files["index.json"], err)
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != "localhost/agentrun/agent:dev" {
		t.Errorf("image name %q", got)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(files[blobPath(index.Manifests[0])], &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
			Env        []string
		} `json:"config"`
	}
	if err := json.Unmarshal(files[blobPath(manifest.Config)], &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != "/agent" ||
		!strings.Contains(strings.Join(config.Config.Env, " "), "HOME=/tmp") {
		t.Errorf("config: %+v", config.Config)
	}
	layer, headers := readTar(t, bytes.NewReader(files[blobPath(manifest.Layers[0])]))
	if string(layer["agent"]) != "#!binary" || headers["agent"].Mode != 0o755 {
		t.Errorf("the binary: %q mode %o", layer["agent"], headers["agent"].Mode)
	}
	if !strings.Contains(string(layer["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd: %q", layer["etc/passwd"])
	}
	if h := headers["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v", h)
	}
}
