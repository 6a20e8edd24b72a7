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
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
)

// build is what the Dockerfile says of one target: the Go binaries its
// builder stage makes (output name to package) and the image of the target
// stage, whose files name those outputs.
type build struct {
	binaries map[string]string
	image    image
}

// goBuild matches one `go build ... -o NAME PKG` of the builder stage's RUN.
var goBuild = regexp.MustCompile(`go build\b.*?-o\s+(\S+)\s+(\./\S*)`)

// parseDockerfile reads the instructions of the Dockerfile's builder stage
// and of its target stage that the image builder reproduces; any other
// instruction in the target stage is an error naming it, so the Dockerfile
// cannot grow a step the real node's images silently lack.
func parseDockerfile(r io.Reader, target string) (build, error) {
	b := build{binaries: map[string]string{}, image: image{files: map[string]string{}, workdir: "/"}}
	stage, builderDir, found := "", "", false
	lines, err := logicalLines(r)
	if err != nil {
		return b, err
	}
	for _, line := range lines {
		inst, rest, _ := strings.Cut(line, " ")
		inst, rest = strings.ToUpper(inst), strings.TrimSpace(rest)
		if inst == "FROM" {
			from, name, _ := strings.Cut(rest, " AS ")
			stage = strings.TrimSpace(name)
			if stage == target {
				found = true
				switch strings.TrimSpace(from) {
				case distrolessNonroot:
					b.image.base = baseNonroot
				case baseScratch:
					b.image.base = baseScratch
				default:
					return b, fmt.Errorf("stage %s: FROM %s: the image builder knows only %s and scratch",
						target, from, distrolessNonroot)
				}
			}
			continue
		}
		switch {
		case stage == "builder" && inst == "WORKDIR":
			builderDir = rest
		case stage == "builder" && inst == "RUN":
			for _, m := range goBuild.FindAllStringSubmatch(rest, -1) {
				b.binaries[path.Join(builderDir, m[1])] = m[2]
			}
		case stage == target:
			if err := b.image.apply(inst, rest); err != nil {
				return b, fmt.Errorf("stage %s: %w", target, err)
			}
		}
	}
	if !found {
		return b, fmt.Errorf("no stage %q in the Dockerfile", target)
	}
	for dst, src := range b.image.files {
		if _, ok := b.binaries[src]; !ok {
			return b, fmt.Errorf("stage %s: COPY %s %s: no `go build -o` in the builder stage makes it", target, src, dst)
		}
	}
	return b, nil
}

// apply records one instruction of the target stage.
func (im *image) apply(inst, rest string) error {
	switch inst {
	case "WORKDIR":
		im.workdir = rest
	case "USER":
		im.user = rest
	case "ENV":
		for kv := range strings.FieldsSeq(rest) {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("ENV %s: only the KEY=VALUE form is supported", rest)
			}
			im.env = append(im.env, kv)
		}
	case "ENTRYPOINT":
		if err := json.Unmarshal([]byte(rest), &im.entrypoint); err != nil {
			return fmt.Errorf("ENTRYPOINT %s: only the JSON (exec) form is supported: %w", rest, err)
		}
	case "COPY":
		f := strings.Fields(rest)
		if len(f) != 3 || f[0] != "--from=builder" {
			return fmt.Errorf("COPY %s: only `COPY --from=builder SRC DST` is supported", rest)
		}
		im.files[f[2]] = f[1]
	default:
		return fmt.Errorf("instruction %s is not supported by the image builder", inst)
	}
	return nil
}

// logicalLines joins continuation lines and drops comments and blank lines.
func logicalLines(r io.Reader) ([]string, error) {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out, sc.Err()
}
