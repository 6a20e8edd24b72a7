//go:build realnode

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

package realnode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/hack/realnode/netns"
	"github.com/agentrun-dev/agentrun/internal/upstream"
	"github.com/agentrun-dev/agentrun/test/utils"
)

const (
	// nodeIP is the node's address in its own network namespace (hack/realnode/realnode.sh).
	nodeIP = "10.250.0.2"
	// upstreamPort is where this process serves the scripted model provider, inside the node.
	upstreamPort = 18080
	// operatorNamespace is where the chart is installed.
	operatorNamespace = "agentrun-system"
	// agentImage is the reference agent's image, built from the Dockerfile's research-agent stage.
	agentImage = "localhost/agentrun/research-agent:dev"
)

var (
	// cl is a cluster-admin client of the real node's API server.
	cl client.Client
	// provider is the scripted model provider the sample policy's "scripted" model points at.
	provider = &upstream.Server{}
	// firstSeen serves the provider and notes when each run's first model request arrived.
	firstSeen = &marks{next: provider, seen: map[string]time.Time{}}
	// state is the node's state directory (REALNODE_STATE).
	state = envOr("REALNODE_STATE", "/var/tmp/agentrun-realnode")
	// script is hack/realnode/realnode.sh.
	script = filepath.Join(utils.ProjectRoot(), "hack", "realnode", "realnode.sh")
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("realnode: the real node needs root; skipped")
		os.Exit(0)
	}
	reuse := os.Getenv("REALNODE_REUSE") == "1"
	start := time.Now()
	if !reuse {
		for _, step := range []string{"up", "images", "install"} {
			if err := realnode(step); err != nil {
				fmt.Fprintf(os.Stderr, "realnode %s: %v\n", step, err)
				_ = realnode("down")
				os.Exit(1)
			}
		}
		fmt.Printf("realnode: node up, images built, chart installed in %s\n", time.Since(start).Round(time.Second))
	}
	fmt.Println("realnode: NetworkPolicies are installed but NOT enforced: the node's CNI (bridge) has no policy support")
	code := 1
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode setup:", err)
	} else {
		code = m.Run()
	}
	if !reuse {
		if err := realnode("down"); err != nil {
			fmt.Fprintln(os.Stderr, "realnode down:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// realnode runs one step of hack/realnode/realnode.sh, its progress on stderr.
func realnode(args ...string) error {
	cmd := exec.Command(script, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// inNode runs a command inside the node's namespaces and returns its output.
func inNode(args ...string) (string, error) {
	out, err := exec.Command(script, append([]string{"exec"}, args...)...).CombinedOutput()
	return string(out), err
}

// kubectl runs the toolchain's kubectl against the node, with kubectl-agentrun on its PATH.
func kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(toolchainDir(), "kubectl"), args...)
	// KUBECONFIG, not --kubeconfig: kubectl takes no flags before a plugin's name.
	cmd.Env = append(os.Environ(), "PATH="+pluginDir()+":"+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func kubeconfig() string { return filepath.Join(state, "kubeconfig") }

func toolchainDir() string { return utils.EnvtestAssets() }

func pluginDir() string { return filepath.Join(state, "plugin") }

// setup connects to the API server, builds kubectl-agentrun, and serves the scripted provider
// inside the node behind the Service the sample policy names (scripted-upstream.agentrun-system).
func setup() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig())
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if cl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir(), "kubectl-agentrun"), "./cmd/kubectl-agentrun")
	build.Dir, build.Stderr = utils.ProjectRoot(), os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building kubectl-agentrun: %w", err)
	}
	init, err := os.ReadFile(filepath.Join(state, "init.pid"))
	if err != nil {
		return err
	}
	l, err := netns.Listen("/proc/"+strings.TrimSpace(string(init))+"/ns/net", net.JoinHostPort(nodeIP, fmt.Sprint(upstreamPort)))
	if err != nil {
		return fmt.Errorf("serving the provider in the node: %w", err)
	}
	go func() { _ = (&http.Server{Handler: firstSeen, ReadHeaderTimeout: 10 * time.Second}).Serve(l) }()
	return providerService(context.Background())
}

// providerService points scripted-upstream.agentrun-system:8080 at the provider: a Service
// without a selector and its EndpointSlice, as for any endpoint outside the cluster.
func providerService(ctx context.Context) error {
	const name = "scripted-upstream"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}},
	}
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{nodeIP}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(upstreamPort))}},
	}
	for _, o := range []client.Object{svc, eps} {
		if err := cl.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return err
		}
	}
	return nil
}
