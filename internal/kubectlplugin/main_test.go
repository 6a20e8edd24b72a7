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
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentrun-dev/agentrun/test/utils"
)

// The commands run against a real kube-apiserver and etcd (envtest) with
// the CRDs installed and no webhooks: nothing stamps an approval's
// approver or time, and no operator writes a status (the tests do, through
// the status subresource).

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error
	k8s     client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	time.Local = time.UTC // event times in the golden files
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// cluster starts envtest once, for the tests that need an API server.
func cluster(t *testing.T) client.Client {
	t.Helper()
	envOnce.Do(func() {
		env = &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
			BinaryAssetsDirectory: utils.EnvtestAssets(),
		}
		envCfg, envErr = env.Start()
		if envErr == nil {
			k8s, envErr = client.New(envCfg, client.Options{Scheme: Scheme})
		}
	})
	if envErr != nil {
		t.Fatalf("envtest: %v", envErr)
	}
	return k8s
}

// testFactory gives the commands the envtest clients, in the namespace of
// -n (the kubectl flags are parsed, and the rest of them ignored).
type testFactory struct {
	flags *genericclioptions.ConfigFlags
	c     client.Client
	kube  kubernetes.Interface
	cfg   *rest.Config
}

func (f *testFactory) Namespace() (string, error) {
	if f.flags.Namespace != nil && *f.flags.Namespace != "" {
		return *f.flags.Namespace, nil
	}
	return "default", nil
}
func (f *testFactory) RESTConfig() (*rest.Config, error)   { return f.cfg, nil }
func (f *testFactory) Client() (client.Client, error)      { return f.c, nil }
func (f *testFactory) Kube() (kubernetes.Interface, error) { return f.kube, nil }

// run executes `kubectl agentrun args…` and returns stdout and stderr.
func run(t *testing.T, now time.Time, f *testFactory, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	flags := genericclioptions.NewConfigFlags(true)
	if f == nil {
		f = &testFactory{}
	}
	f.flags = flags
	if f.c == nil && f.cfg == nil {
		f.c, f.cfg = k8s, envCfg
	}
	noColor := false
	cmd := NewCommand(Options{
		Streams:     genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
		Factory:     f,
		ConfigFlags: flags,
		Now:         func() time.Time { return now },
		Color:       &noColor,
	})
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
}
