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

// Command realnode is the Go half of hack/realnode: it builds the project's
// images without a registry or a container engine, and forwards a port of
// this machine into the real node's network namespace.
//
//	realnode image -dockerfile Dockerfile -target manager -name localhost/agentrun/manager:dev -o manager.tar
//	realnode image -base scratch -copy /pause=bin/pause -entrypoint /pause -name localhost/agentrun/pause:dev -o p.tar
//	realnode proxy -netns /proc/PID/ns/net -listen 127.0.0.1:16443 -to 10.250.0.1:6443
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: realnode image|proxy [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "image":
		err = imageCmd(os.Args[2:])
	case "proxy":
		err = proxyCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want image or proxy", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		os.Exit(1)
	}
}

// list is a repeatable flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func imageCmd(args []string) error {
	fs := flag.NewFlagSet("image", flag.ExitOnError)
	dockerfile := fs.String("dockerfile", "", "build the stage -target of this Dockerfile")
	target := fs.String("target", "", "the Dockerfile's stage to build")
	name := fs.String("name", "", "the image's reference, e.g. localhost/agentrun/manager:dev")
	out := fs.String("o", "", "the OCI archive to write")
	base := fs.String("base", baseScratch, "without -dockerfile: scratch or nonroot")
	entrypoint := fs.String("entrypoint", "", "without -dockerfile: the entrypoint (one path)")
	user := fs.String("user", "", "without -dockerfile: the image's USER")
	var copies list
	fs.Var(&copies, "copy", "without -dockerfile: DST=SRC, a file of this machine into the image (repeatable)")
	_ = fs.Parse(args)
	if *name == "" || *out == "" {
		return fmt.Errorf("-name and -o are required")
	}
	var im image
	if *dockerfile != "" {
		var err error
		if im, err = fromDockerfile(*dockerfile, *target); err != nil {
			return err
		}
	} else {
		im = image{base: *base, files: map[string]string{}, user: *user, workdir: "/"}
		if *entrypoint != "" {
			im.entrypoint = []string{*entrypoint}
		}
		for _, c := range copies {
			dst, src, ok := strings.Cut(c, "=")
			if !ok {
				return fmt.Errorf("-copy %s: want DST=SRC", c)
			}
			im.files[dst] = src
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := im.writeOCI(f, *name); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// fromDockerfile builds the Go binaries the Dockerfile's builder stage
// makes, as it makes them (static, trimmed, stripped), from the Dockerfile's
// build context (its directory less .dockerignore), and returns the target stage's image with its files pointing at
// them.
func fromDockerfile(dockerfile, target string) (image, error) {
	f, err := os.Open(dockerfile)
	if err != nil {
		return image{}, err
	}
	b, err := parseDockerfile(f, target)
	_ = f.Close()
	if err != nil {
		return image{}, fmt.Errorf("%s: %w", dockerfile, err)
	}
	tmp, err := os.MkdirTemp("", "realnode-image-")
	if err != nil {
		return image{}, err
	}
	// The build sees what `COPY . .` gives the Dockerfile: the context less its .dockerignore.
	context := filepath.Join(tmp, "context")
	if err := copyContext(filepath.Dir(dockerfile), context); err != nil {
		return image{}, fmt.Errorf("build context: %w", err)
	}
	// One go build for every binary of the stage: it shares the work between them. Each lands
	// in tmp under its package directory's name.
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", tmp + "/"}
	for _, src := range b.image.files {
		args = append(args, b.binaries[src])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = context
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return image{}, fmt.Errorf("go build %v: %w", args[5:], err)
	}
	for dst, src := range b.image.files {
		b.image.files[dst] = filepath.Join(tmp, filepath.Base(b.binaries[src]))
	}
	return b.image, nil
}
