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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The images hack/realnode builds are the repository Dockerfile's stages: its binaries, paths,
// user, environment and entrypoint, read from the Dockerfile itself.
func TestParseRepositoryDockerfile(t *testing.T) {
	for target, want := range map[string]build{
		"manager": {image: image{
			base: baseNonroot, user: "65532:65532", workdir: "/", entrypoint: []string{"/manager"},
			files: map[string]string{"/manager": "/workspace/manager", "/gateway": "/workspace/gateway",
				"/agentrun-tools": "/workspace/agentrun-tools", "/agentrun-stream": "/workspace/agentrun-stream"},
		}},
		"research-agent": {image: image{
			base: baseNonroot, user: "65532:65532", workdir: "/", entrypoint: []string{"/research-agent"},
			env: []string{"HOME=/tmp"}, files: map[string]string{"/research-agent": "/workspace/research-agent"},
		}},
	} {
		t.Run(target, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "..", "Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			got, err := parseDockerfile(f, target)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.image, got.image, cmp.AllowUnexported(image{})); diff != "" {
				t.Errorf("image (-want +got):\n%s", diff)
			}
			if got.binaries["/workspace/manager"] != "./cmd" || got.binaries["/workspace/research-agent"] != "./cmd/research-agent" {
				t.Errorf("binaries: %v", got.binaries)
			}
		})
	}
}

// A stage step the builder cannot reproduce is refused by name, so the Dockerfile cannot grow a
// step the real node's images silently lack.
func TestParseDockerfileRefusesWhatItCannotBuild(t *testing.T) {
	for name, tc := range map[string]struct{ dockerfile, want string }{
		"RUN in the final stage": {"FROM golang AS builder\nRUN go build -o a ./cmd/a\n" +
			"FROM gcr.io/distroless/static:nonroot AS app\nRUN echo hi\n", "instruction RUN is not supported"},
		"another base": {"FROM alpine AS app\n", "FROM alpine: the image builder knows only"},
		"a file no build makes": {"FROM golang AS builder\nFROM scratch AS app\nCOPY --from=builder /w/x /x\n",
			"no `go build -o` in the builder stage makes it"},
		"no such stage":     {"FROM scratch AS other\n", `no stage "app"`},
		"shell entrypoint":  {"FROM scratch AS app\nENTRYPOINT /x\n", "only the JSON (exec) form"},
		"COPY from context": {"FROM scratch AS app\nCOPY a /a\n", "only `COPY --from=builder SRC DST`"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseDockerfile(strings.NewReader(tc.dockerfile), "app")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
