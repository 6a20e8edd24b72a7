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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"A": "x", "POD": "p-1"}
	for in, want := range map[string]string{
		"plain":              "plain",
		"$(A)":               "x",
		"--name=$(POD)/$(A)": "--name=p-1/x",
		"$$(A)":              "$(A)",
		"$(MISSING)":         "$(MISSING)",
		"$(unterminated":     "$(unterminated",
		"cost $5":            "cost $5",
		"$":                  "$",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	bin := "/opt/bin/research-agent"
	vars := map[string]string{"SCRIPT": "s1"}
	cases := []struct {
		name     string
		c        corev1.Container
		wantExe  string
		wantArgs []string
	}{
		{"args only", corev1.Container{Args: []string{"--script-configmap=$(SCRIPT)"}}, bin, []string{"--script-configmap=s1"}},
		{"command names the binary", corev1.Container{Command: []string{"/research-agent", "--provider=scripted"}, Args: []string{"-v"}},
			bin, []string{"--provider=scripted", "-v"}},
	}
	for _, c := range cases {
		exe, args, err := commandLine(bin, &c.c, vars)
		if err != nil || exe != c.wantExe || !slices.Equal(args, c.wantArgs) {
			t.Errorf("%s: got %s %q %v, want %s %q", c.name, exe, args, err, c.wantExe, c.wantArgs)
		}
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	exe, args, err := commandLine(bin, &corev1.Container{Command: []string{"sh", "-c", "echo $(SCRIPT)"}}, vars)
	if err != nil || exe != sh || !slices.Equal(args, []string{"-c", "echo s1"}) {
		t.Errorf("host command: got %s %q %v", exe, args, err)
	}
	if _, _, err := commandLine(bin, &corev1.Container{Command: []string{"/no/such/entrypoint"}}, vars); err == nil {
		t.Error("an unknown command should be an error")
	}
}

func TestTailOffset(t *testing.T) {
	data := []byte("one\ntwo\nthree\n")
	for n, want := range map[int]string{1: "three\n", 2: "two\nthree\n", 3: "one\ntwo\nthree\n", 10: "one\ntwo\nthree\n"} {
		if got := string(data[tailOffset(data, n):]); got != want {
			t.Errorf("tail %d = %q, want %q", n, got, want)
		}
	}
	last := []byte("a\nno newline at the end")
	if got := string(last[tailOffset(last, 1):]); got != "no newline at the end" {
		t.Errorf("tail of a file without a final newline = %q", got)
	}
}

func TestImageMap(t *testing.T) {
	r, err := ParseImageRule("research-agent=bin/agent")
	if err != nil || r.Match != "research-agent" || !filepath.IsAbs(r.Binary) {
		t.Fatalf("ParseImageRule: %+v %v", r, err)
	}
	if _, err := ParseImageRule("nobinary"); err == nil {
		t.Error("a rule without = should be an error")
	}
	m := ImageMap{{Match: "mini", Binary: "/a"}, {Match: "agent", Binary: "/b"}}
	if b, _ := m.Resolve("e2e/miniagent:1"); b != "/a" {
		t.Errorf("first match should win, got %s", b)
	}
	if _, err := m.Resolve("nginx"); err == nil || !strings.Contains(err.Error(), "nginx") {
		t.Errorf("unmapped image: %v", err)
	}

	dir := t.TempDir()
	f := filepath.Join(dir, "images.yaml")
	if err := os.WriteFile(f, []byte("images:\n- {match: x, binary: rel/x}\n- {match: y, binary: /abs/y}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadImageMap(f)
	if err != nil || len(loaded) != 2 || loaded[0].Binary != filepath.Join(dir, "rel/x") || loaded[1].Binary != "/abs/y" {
		t.Errorf("LoadImageMap: %+v %v", loaded, err)
	}
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u-1",
		Labels: map[string]string{"app": "a"}}}
	ref := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: ref("metadata.name")},
		{Name: "POD_UID", ValueFrom: ref("metadata.uid")},
		{Name: "APP", ValueFrom: ref("metadata.labels['app']")},
		{Name: "KUBERNETES_SERVICE_HOST", Value: "10.0.0.1"},
		{Name: "PLAIN", Value: "v"},
	}}
	got := map[string]string{}
	for _, e := range containerEnv(pod, c) {
		got[e.Name] = e.Value
	}
	want := map[string]string{"POD_NAME": "p", "POD_UID": "u-1", "APP": "a", "PLAIN": "v"}
	if len(got) != len(want) {
		t.Fatalf("env = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestMountRewriting(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "gateway", MountPath: "/var/run/secrets/agentrun.dev/gateway"},
	}}
	mm := mounts(c, map[string]string{"gateway": "/pods/p/volumes/gateway"}) // emptyDir tmp is not rewritten
	for in, want := range map[string]string{
		"/var/run/secrets/agentrun.dev/gateway/token":       "/pods/p/volumes/gateway/token",
		"--ca=/var/run/secrets/agentrun.dev/gateway/ca.crt": "--ca=/pods/p/volumes/gateway/ca.crt",
		"/tmp/ci/examples/openai-ts/complete.mjs":           "/tmp/ci/examples/openai-ts/complete.mjs",
		"/var/run/secrets/agentrun.dev/gatewayish/x":        "/var/run/secrets/agentrun.dev/gatewayish/x",
	} {
		if got := mm.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}
