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
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ignoreRule is one line of a .dockerignore: a path pattern, or its exception (!pattern).
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// parseDockerignore reads .dockerignore rules as Docker does: in order, the last rule matching a
// path (or one of its parent directories) wins; ** is any number of directories, * and ? stay
// within one.
func parseDockerignore(r io.Reader) ([]ignoreRule, error) {
	var rules []ignoreRule
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rule := ignoreRule{}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			rule.negate, line = true, p
		}
		line = strings.TrimPrefix(filepath.Clean(line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("(/.*)?$")
		var err error
		if rule.re, err = regexp.Compile(re.String()); err != nil {
			return nil, err
		}
		rules = append(rules, rule)
	}
	return rules, sc.Err()
}

// excluded says whether the context leaves out path (slash-separated, relative to the context).
func excluded(rules []ignoreRule, path string) bool {
	out := false
	for _, r := range rules {
		if r.re.MatchString(path) {
			out = !r.negate
		}
	}
	return out
}

// copyContext copies the files of the build context at root that its .dockerignore keeps into
// dst: what `COPY . .` gives the Dockerfile's builder stage.
func copyContext(root, dst string) error {
	var rules []ignoreRule
	if f, err := os.Open(filepath.Join(root, ".dockerignore")); err == nil {
		rules, err = parseDockerignore(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || excluded(rules, filepath.ToSlash(rel)) || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
}
