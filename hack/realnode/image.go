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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// image is what one OCI image holds: its files (path in the image to the
// path on this machine) and the runtime config of its ENTRYPOINT, USER, ENV
// and WORKDIR. base says what lies under the files: "scratch" (nothing) or
// "nonroot" (what gcr.io/distroless/static:nonroot gives a static binary).
type image struct {
	base       string
	files      map[string]string
	entrypoint []string
	user       string
	env        []string
	workdir    string
}

// Bases the builder knows, by the FROM line that names them.
const (
	baseScratch = "scratch"
	baseNonroot = "nonroot"
)

// distrolessNonroot is the FROM of the Dockerfile's final stages; the builder
// gives the same files a static binary uses from it.
const distrolessNonroot = "gcr.io/distroless/static:nonroot"

// epoch is every file's mtime, so an image's digest depends on its content only.
var epoch = time.Unix(0, 0).UTC()

// nonrootFiles are distroless static:nonroot's users, groups and home, in the
// order they go into the layer.
var nonrootFiles = []struct {
	name, content string
	dir           bool
	mode          int64
}{
	{name: "etc/", dir: true, mode: 0o755},
	{name: "etc/passwd", mode: 0o644, content: "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
	{name: "etc/group", mode: 0o644, content: "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"},
	{name: "home/", dir: true, mode: 0o755},
	{name: "home/nonroot/", dir: true, mode: 0o700},
	{name: "tmp/", dir: true, mode: 0o1777},
}

// caBundle is where Debian keeps the CA bundle distroless ships at the same path.
const caBundle = "etc/ssl/certs/ca-certificates.crt"

// layer writes the image's one layer: the base's files, then each file of
// the image, with the directories above it.
func (im image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mkdirs := func(p string) error {
		var parts []string
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, d := range parts {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			h := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		return nil
	}
	write := func(name string, mode int64, data []byte, uid int) error {
		if err := mkdirs(name); err != nil {
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			ModTime: epoch, Uid: uid, Gid: uid}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	switch im.base {
	case baseScratch:
	case baseNonroot:
		for _, f := range nonrootFiles {
			name := strings.TrimSuffix(f.name, "/")
			if f.dir {
				dirs[name] = true
				uid := 0
				if name == "home/nonroot" {
					uid = 65532
				}
				h := &tar.Header{Typeflag: tar.TypeDir, Name: f.name, Mode: f.mode, ModTime: epoch, Uid: uid, Gid: uid}
				if err := tw.WriteHeader(h); err != nil {
					return nil, err
				}
				continue
			}
			if err := write(f.name, f.mode, []byte(f.content), 0); err != nil {
				return nil, err
			}
		}
		if data, err := os.ReadFile("/" + caBundle); err == nil {
			if err := write(caBundle, 0o644, data, 0); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("base %q: want %q or %q", im.base, baseScratch, baseNonroot)
	}
	names := make([]string, 0, len(im.files))
	for name := range im.files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		data, err := os.ReadFile(im.files[name])
		if err != nil {
			return nil, err
		}
		if err := write(strings.TrimPrefix(name, "/"), 0o755, data, 0); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func describe(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
}

// writeOCI writes the image as an OCI image layout in one tar, the form
// `ctr images import` takes, named ref (e.g. localhost/agentrun/manager:dev).
func (im image) writeOCI(w io.Writer, ref string) error {
	layer, err := im.layer()
	if err != nil {
		return err
	}
	layerDesc := describe("application/vnd.oci.image.layer.v1.tar", layer)
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, im.env...)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"User": im.user, "Env": env, "Entrypoint": im.entrypoint, "WorkingDir": im.workdir,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := describe("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := describe("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifestDesc},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
		{blobPath(layerDesc), layer},
	} {
		if err := put(f.name, f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func blobPath(d descriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}
