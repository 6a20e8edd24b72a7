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

// Package stack is agentrun's embedded local stack: etcd and kube-apiserver
// (envtest's control plane, on loopback), the CRDs, RBAC, admission policies
// and webhook configurations from config/, the operator binary as its own
// process under its own identity, the gateway and the reference tool server
// (cmd/agentrun-tools) as processes of their own, and a local node (internal/devstack/node) that
// runs attempt pods as processes. cmd/agentrun-dev (make dev) and test/e2e
// both start it.
package stack

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/node"
	"github.com/agentrun-dev/agentrun/internal/devstack/webhookpatch"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// The operator's identity and namespace, as config/default deploys it.
const (
	OperatorNamespace      = "agentrun-system"
	OperatorServiceAccount = "agentrun-controller-manager"
	OperatorUser           = "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
	// LeaseName is the operator's leader election Lease (cmd/main.go's LeaderElectionID).
	LeaseName = "agentrun.agentrun.dev"
	// NamePrefix is config/default's namePrefix.
	NamePrefix = "agentrun-"
	// NodeUser is the local node's identity (a member of system:masters:
	// it binds pods, writes their status and requests pod-bound tokens).
	NodeUser = "system:node:" + node.DefaultNodeName
	// mastersGroup is the group the API server grants everything.
	mastersGroup = "system:masters"
)

// Scheme knows the built-in types and agentrun.dev.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Options configures a stack.
type Options struct {
	// Root is the repository root; config/ is read from there.
	Root string
	// Assets holds kube-apiserver, etcd and kubectl (see Toolchain).
	Assets string
	// Dir is the stack's state directory: kubeconfigs, logs/, pods/.
	Dir string
	// OperatorBinary is the built operator (go build ./cmd).
	OperatorBinary string
	// OperatorArgs are appended to the operator's flags.
	OperatorArgs []string
	// Images maps attempt pod images to local binaries.
	Images node.ImageMap
	// Out receives progress lines (default: discard).
	Out io.Writer
	// DisableLeaderElection runs the operator without --leader-elect.
	DisableLeaderElection bool
	// GatewayBinary is the built gateway (go build ./cmd/gateway).
	GatewayBinary string
	// GatewayArgs are appended to the gateway's flags.
	GatewayArgs []string
	// UpstreamLatency is the scripted upstream's fixed latency.
	UpstreamLatency time.Duration
	// StreamBinary is the built run-stream server (go build
	// ./cmd/agentrun-stream); empty runs none (and the gateway streams no
	// events).
	StreamBinary string
	// StreamArgs are appended to the stream server's flags.
	StreamArgs []string
	// ToolsBinary is the built reference tool server (go build
	// ./cmd/agentrun-tools); empty runs none.
	ToolsBinary string
	// ToolsAllowHosts are the hosts its http.get may fetch (default
	// SampleToolHosts).
	ToolsAllowHosts []string
	// ToolsFakeConfig, when set, is a --fake-config file: the server also
	// serves its scripted tools and records their calls (ToolsCallsURL).
	ToolsFakeConfig string
	// ToolsTokenFile, when set, holds the bearer token the server requires.
	ToolsTokenFile string
	// ToolsArgs are appended to the tool server's flags.
	ToolsArgs []string
	// GatewayAPIFaults puts a fault-injecting proxy (Stack.APIFaults)
	// between the gateway process and kube-apiserver, so a test can make
	// TokenReviews fail. Off, the gateway talks to the API server directly.
	GatewayAPIFaults bool
	// GatewayTokenCacheTTL, when set, is the gateway's --token-cache-ttl
	// (how long its door reuses a TokenReview answer; default 10s). The
	// auth interceptor never uses the cache.
	GatewayTokenCacheTTL time.Duration
	// DisableControllerManager runs no kube-controller-manager: nothing
	// collects owned objects and a deleted namespace stays Terminating.
	DisableControllerManager bool
}

// Stack is a running local stack.
type Stack struct {
	opts Options

	Env *envtest.Environment
	// Admin is a system:masters config (not the operator's identity).
	Admin     *rest.Config
	Client    client.WithWatch
	Clientset kubernetes.Interface
	// Kubeconfig is the admin kubeconfig file (Dir/kubeconfig).
	Kubeconfig string
	// Kubectl is the toolchain's kubectl.
	Kubectl  string
	Node     *node.Node
	Operator *Operator
	// ControllerManager is kube-controller-manager with its garbage
	// collector and namespace controller (nil with
	// Options.DisableControllerManager).
	ControllerManager *Operator
	// MetricsURL is the operator's metrics endpoint.
	MetricsURL string
	// LeaderElection says whether the operator runs with --leader-elect.
	LeaderElection bool
	// LogDir holds kube-apiserver.log, etcd.log, operator.log, gateway.log,
	// audit.jsonl, tools.log, local-node.log.
	LogDir string

	// Gateway is the agentrun-gateway process; GatewayURL where attempt
	// pods reach it; GatewayCAFile the CA that signs its certificate.
	Gateway           *Operator
	GatewayURL        string
	GatewayCAFile     string
	GatewayMetricsURL string
	// AuditLog is the file the gateway's audit interceptor appends its
	// JSON lines to (--audit-log, LogDir/audit.jsonl; opened anew per line).
	AuditLog string
	// APIFaults is the proxy between the gateway and the API server (nil
	// without Options.GatewayAPIFaults).
	APIFaults *APIFaults
	// Upstream is the scripted upstream (fake OpenAI-compatible provider)
	// the samples' models point at; UpstreamURL its base URL (…/v1).
	Upstream    *upstream.Server
	UpstreamURL string
	// Tools is the agentrun-tools process (nil without
	// Options.ToolsBinary); ToolsURL its MCP endpoint (http://…/mcp), what
	// a RuntimePolicy's spec.toolServers[].url names; ToolsCallsURL the
	// fake's GET /calls (only with Options.ToolsFakeConfig).
	Tools         *Operator
	ToolsURL      string
	ToolsCallsURL string
	// Stream is the agentrun-stream process (nil without
	// Options.StreamBinary): StreamURL serves the web page and the SSE
	// endpoints, StreamNATSURL is its NATS listener (the gateway's
	// --stream-url), StreamStoreDir its JetStream store.
	Stream           *Operator
	StreamURL        string
	StreamMetricsURL string
	StreamNATSURL    string
	StreamStoreDir   string

	closers []io.Closer
	// certDirs are the webhook serving-certificate directories envtest
	// made in the system's temporary directory; Stop removes them.
	certDirs []string
}

func (o *Options) out() io.Writer {
	if o.Out == nil {
		return io.Discard
	}
	return o.Out
}

// Start brings the stack up. On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, retErr error) {
	s := &Stack{opts: opts}
	defer func() {
		if retErr != nil {
			s.Stop()
		}
	}()
	out := opts.out()
	if opts.Root == "" || opts.Assets == "" || opts.Dir == "" || opts.OperatorBinary == "" || opts.GatewayBinary == "" {
		return nil, errors.New("stack: Root, Assets, Dir, OperatorBinary and GatewayBinary are required")
	}
	var err error
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	s.opts.Dir = opts.Dir
	s.LogDir = filepath.Join(opts.Dir, "logs")
	// A fresh control plane every time: nothing from a previous stack is
	// meaningful (its pods' directories and logs included).
	for _, d := range []string{"pods", "logs", "shim", "controller-manager"} {
		if err := os.RemoveAll(filepath.Join(opts.Dir, d)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return nil, err
	}
	assets, err := prepareShim(filepath.Join(opts.Dir, "shim"), opts.Assets)
	if err != nil {
		return nil, fmt.Errorf("preparing the process shim: %w", err)
	}
	s.Kubectl = filepath.Join(opts.Assets, "kubectl")

	// 1. etcd and kube-apiserver, with the CRDs and the webhook configurations.
	if err := s.startControlPlane(assets); err != nil {
		return nil, err
	}

	// An admin kubeconfig for the user, and clients.
	admin, err := s.Env.AddUser(envtest.User{Name: "agentrun-dev-admin", Groups: []string{mastersGroup}}, nil)
	if err != nil {
		return nil, err
	}
	s.Kubeconfig = filepath.Join(opts.Dir, "kubeconfig")
	if err := writeKubeconfig(admin, s.Kubeconfig); err != nil {
		return nil, err
	}
	s.Admin = admin.Config()
	s.Admin.QPS, s.Admin.Burst = 100, 200
	if s.Client, err = client.NewWithWatch(s.Admin, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if s.Clientset, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return nil, err
	}
	// envtest installed config/webhook/manifests.yaml as controller-gen
	// wrote it; config/webhook's kustomize patches add the rest.
	if err := webhookpatch.Apply(ctx, s.Client, filepath.Join(opts.Root, "config", "webhook")); err != nil {
		return nil, fmt.Errorf("patching the webhook configurations as config/webhook/kustomization.yaml does: %w", err)
	}

	// 2. The operator's namespace, RBAC and admission policies from config/,
	// and kube-controller-manager's garbage collector and namespace
	// controller.
	_, _ = fmt.Fprintln(out, "==> installing RBAC (config/rbac) and ValidatingAdmissionPolicies (config/admission-policy)")
	if err := s.install(ctx); err != nil {
		return nil, err
	}
	if !opts.DisableControllerManager {
		if err := s.startControllerManager(ctx); err != nil {
			return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
		}
	}

	// 3. The local node.
	_, _ = fmt.Fprintln(out, "==> starting the local node (virtual-kubelet, pods run as local processes)")
	nodeUser, err := s.Env.AddUser(envtest.User{Name: NodeUser, Groups: []string{"system:nodes", mastersGroup}}, nil)
	if err != nil {
		return nil, err
	}
	nodeCfg := nodeUser.Config()
	nodeCfg.QPS, nodeCfg.Burst = 100, 200
	nodeClient, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		return nil, err
	}
	nodeLog, err := s.logFile("local-node.log")
	if err != nil {
		return nil, err
	}
	s.Node, err = node.Start(ctx, node.Config{
		Client:       nodeClient,
		APIServerURL: s.Admin.Host,
		CAData:       s.Admin.CAData,
		Dir:          filepath.Join(opts.Dir, "pods"),
		Images:       opts.Images,
		Log:          zap.New(zap.WriteTo(nodeLog), zap.UseDevMode(true)),
	})
	if err != nil {
		return nil, fmt.Errorf("starting the local node: %w", err)
	}

	// 4. The scripted upstream, the tool server, and the gateway under its
	// own identity.
	if err := s.startServices(ctx); err != nil {
		return nil, err
	}

	// 5. The operator binary under its own identity.
	if err := s.startOperator(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// startControlPlane starts etcd and kube-apiserver (envtest) with the
// CRDs and the webhook configurations. envtest writes the webhook serving
// certificate into a directory of its own under the system's temporary
// directory; the stack keeps its name so that Stop removes it whatever
// happened in between.
func (s *Stack) startControlPlane(assets string) error {
	out, opts := s.opts.out(), s.opts
	_, _ = fmt.Fprintln(out, "==> starting etcd and kube-apiserver on 127.0.0.1 (envtest control plane)")
	start := time.Now()
	s.Env = &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join(opts.Root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(opts.Root, "config", "webhook", "manifests.yaml")},
			LocalServingHost: "127.0.0.1",
		},
	}
	apiLog, err := s.logFile("kube-apiserver.log")
	if err != nil {
		return err
	}
	etcdLog, err := s.logFile("etcd.log")
	if err != nil {
		return err
	}
	api := s.Env.ControlPlane.GetAPIServer()
	api.Out, api.Err = apiLog, apiLog
	s.Env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	// envtest's Start prepares the webhook certificates (and the port)
	// itself, after the control plane is up.
	s.Admin, err = s.Env.Start()
	if d := s.Env.WebhookInstallOptions.LocalServingCertDir; d != "" {
		s.certDirs = append(s.certDirs, d)
	}
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	_, _ = fmt.Fprintf(out, "    API server %s, up in %s\n", s.Admin.Host, time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (s *Stack) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.LogDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, f)
	return f, nil
}

func writeKubeconfig(u *envtest.AuthenticatedUser, path string) error {
	kc, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, kc, 0o600)
}

// install creates the operator's namespace and applies config/rbac and
// config/admission-policy (and the gateway's and the stream's RBAC) as config/default would (namePrefix agentrun-,
// namespace agentrun-system).
func (s *Stack) install(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := s.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, dir := range []string{"rbac", filepath.Join("gateway", "rbac"), filepath.Join("stream", "rbac"), "admission-policy"} {
		objs, err := kustomizeDir(filepath.Join(s.opts.Root, "config", dir))
		if err != nil {
			return err
		}
		for _, u := range objs {
			namespaced, err := s.Client.IsObjectNamespaced(u)
			if err != nil {
				return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
			prefixed(u, namespaced)
			if err := s.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// kustomizeDir reads the resources a kustomization.yaml lists, in order.
func kustomizeDir(dir string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		objs, err := ReadYAML(filepath.Join(dir, r))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// ReadYAML reads every object of a multi-document YAML file.
func ReadYAML(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// DecodeYAML decodes every object of a multi-document YAML stream.
func DecodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for doc := range strings.SplitSeq("\n"+string(data), "\n---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

// prefixed applies config/default's namePrefix and namespace to u and to the
// names it refers to (roleRef, service account subjects, policyName).
func prefixed(u *unstructured.Unstructured, namespaced bool) {
	u.SetName(NamePrefix + u.GetName())
	if namespaced {
		u.SetNamespace(OperatorNamespace)
	}
	switch u.GetKind() {
	case "RoleBinding", "ClusterRoleBinding":
		if name, ok, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ok {
			_ = unstructured.SetNestedField(u.Object, NamePrefix+name, "roleRef", "name")
		}
		subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		for i, sub := range subjects {
			m, ok := sub.(map[string]any)
			if !ok || m["kind"] != "ServiceAccount" {
				continue
			}
			m["name"] = NamePrefix + fmt.Sprint(m["name"])
			m["namespace"] = OperatorNamespace
			subjects[i] = m
		}
		if subjects != nil {
			_ = unstructured.SetNestedSlice(u.Object, subjects, "subjects")
		}
	case "ValidatingAdmissionPolicyBinding":
		if pn, ok, _ := unstructured.NestedString(u.Object, "spec", "policyName"); ok {
			_ = unstructured.SetNestedField(u.Object, NamePrefix+pn, "spec", "policyName")
		}
	}
}

// startServices starts the scripted upstream, the tool server, the stream
// server and the gateway, in that order (the gateway names the others).
func (s *Stack) startServices(ctx context.Context) error {
	if err := s.startUpstream(); err != nil {
		return err
	}
	if err := s.startTools(ctx); err != nil {
		return err
	}
	if err := s.startStream(ctx); err != nil {
		return err
	}
	return s.startGateway(ctx)
}

// serviceAccountKubeconfig writes a kubeconfig for user, a service account of
// the operator's namespace, into Dir/name.
func (s *Stack) serviceAccountKubeconfig(user, name string) (string, error) {
	_, path, err := s.serviceAccountUser(user, name)
	return path, err
}

// serviceAccountUser adds user, a service account of the operator's
// namespace, and writes its kubeconfig into Dir/name.
func (s *Stack) serviceAccountUser(user, name string) (*rest.Config, string, error) {
	u, err := s.Env.AddUser(envtest.User{Name: user, Groups: []string{
		"system:serviceaccounts", "system:serviceaccounts:" + OperatorNamespace, "system:authenticated",
	}}, nil)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(s.opts.Dir, name)
	return u.Config(), path, writeKubeconfig(u, path)
}

// startOperator writes the operator's kubeconfig (its own identity) and
// starts the binary with leader election, metrics and webhooks on loopback.
func (s *Stack) startOperator(ctx context.Context) error {
	out := s.opts.out()
	kubeconfig, err := s.serviceAccountKubeconfig(OperatorUser, "operator.kubeconfig")
	if err != nil {
		return err
	}
	flags, err := binaryFlags(ctx, s.opts.OperatorBinary)
	if err != nil {
		return err
	}
	metricsPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	healthPort, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	wio := &s.Env.WebhookInstallOptions
	s.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	args := []string{
		"--kubeconfig=" + kubeconfig,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		"--metrics-secure=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", healthPort),
		"--webhook-cert-path=" + wio.LocalServingCertDir,
		fmt.Sprintf("--webhook-port=%d", wio.LocalServingPort),
	}
	if flags["gateway-url"] {
		args = append(args, "--gateway-url="+s.GatewayURL, "--gateway-ca-file="+s.GatewayCAFile)
	}
	// Loopback only, when the binary lets us say so.
	for _, f := range []string{"webhook-host", "webhook-bind-address"} {
		if flags[f] {
			args = append(args, fmt.Sprintf("--%s=127.0.0.1", f))
			break
		}
	}
	s.LeaderElection = !s.opts.DisableLeaderElection
	if s.LeaderElection {
		// controller-runtime finds the Lease's namespace from the in-cluster
		// service-account mount, which a local process does not have.
		if flags["leader-election-namespace"] {
			args = append(args, "--leader-elect", "--leader-election-namespace="+OperatorNamespace)
		} else {
			s.LeaderElection = false
			_, _ = fmt.Fprintln(out, "    note: the operator binary has no --leader-election-namespace flag, so it runs without leader election")
		}
	}
	args = append(args, s.opts.OperatorArgs...)
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}, otelEnv(os.Environ())...)
	s.Operator = &Operator{
		Binary:     s.opts.OperatorBinary,
		Args:       args,
		Env:        env,
		LogPath:    filepath.Join(s.LogDir, "operator.log"),
		HealthAddr: fmt.Sprintf("127.0.0.1:%d", healthPort),
	}
	_, _ = fmt.Fprintf(out, "==> starting the operator (%s) as %s\n", rel(s.opts.Root, s.opts.OperatorBinary), OperatorUser)
	return s.StartOperator(ctx)
}

// StartOperator starts the operator process and waits until it serves its
// webhooks and, with leader election, holds the Lease.
func (s *Stack) StartOperator(ctx context.Context) error {
	start := time.Now()
	prev := ""
	if s.LeaderElection {
		prev = s.leaseHolder(ctx)
	}
	if err := s.Operator.Start(); err != nil {
		return err
	}
	if err := s.Operator.WaitReady(ctx, 90*time.Second); err != nil {
		return err
	}
	if err := s.waitWebhooks(ctx, 60*time.Second); err != nil {
		return err
	}
	if s.LeaderElection {
		if err := s.waitLeader(ctx, prev, 90*time.Second); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(s.opts.out(), "    operator pid %d ready in %s (log: %s)\n", s.Operator.Pid(),
		time.Since(start).Round(100*time.Millisecond), rel(s.opts.Root, s.Operator.LogPath))
	return nil
}

// waitWebhooks waits until the webhook server answers TLS and a dry-run
// create of a RuntimePolicy passes the validating webhook.
func (s *Stack) waitWebhooks(ctx context.Context, timeout time.Duration) error {
	wio := &s.Env.WebhookInstallOptions
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.Operator.Done():
			return fmt.Errorf("the operator exited; see %s", s.Operator.LogPath)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe
		if err == nil {
			_ = conn.Close()
			probe := &v1alpha1.RuntimePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "webhook-probe"}}
			if err = s.Client.Create(ctx, probe, client.DryRunAll); err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the operator's webhooks did not answer within %s: %v", timeout, last)
}

// leaseHolder returns the operator Lease's holder, or "".
func (s *Stack) leaseHolder(ctx context.Context) string {
	lease := &coordinationv1.Lease{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: OperatorNamespace, Name: LeaseName}, lease); err != nil {
		return ""
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// waitLeader waits until a holder other than prev holds the Lease: every
// operator process has a fresh identity, so that is the process just started.
// After a SIGKILL the old holder's Lease must expire first (15 s).
func (s *Stack) waitLeader(ctx context.Context, prev string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if h := s.leaseHolder(ctx); h != "" && h != prev {
			return nil
		}
		select {
		case <-s.Operator.Done():
			return fmt.Errorf("the operator exited; see %s", s.Operator.LogPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the operator did not acquire Lease %s/%s within %s", OperatorNamespace, LeaseName, timeout)
}

// binaryFlags returns the flags a Go binary lists in its -help output.
func binaryFlags(ctx context.Context, bin string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-help")
	cmd.Stdout, cmd.Stderr = &buf, &buf
	_ = cmd.Run() // -help exits 0 or 2 depending on the flag package
	if buf.Len() == 0 {
		return nil, fmt.Errorf("%s -help printed nothing", bin)
	}
	flags := map[string]bool{}
	for line := range strings.SplitSeq(buf.String(), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "-") {
			continue
		}
		name := strings.TrimLeft(strings.Fields(line)[0], "-")
		name, _, _ = strings.Cut(name, "=")
		flags[name] = true
	}
	return flags, nil
}

// Stop tears everything down: the operator, the gateway, the tool server,
// kube-controller-manager, every pod process, the local node,
// kube-apiserver and etcd, and the webhook certificate directory envtest
// made in the system's temporary directory. It is safe to call more than
// once.
func (s *Stack) Stop() {
	// The operator and the pod processes stop side by side; the control
	// plane goes last.
	var wg sync.WaitGroup
	if s.Operator != nil {
		wg.Go(func() { s.Operator.Stop(10 * time.Second) })
	}
	if s.Gateway != nil {
		wg.Go(func() { s.Gateway.Stop(10 * time.Second) })
	}
	if s.Tools != nil {
		wg.Go(func() { s.Tools.Stop(15 * time.Second) })
	}
	if s.Stream != nil {
		wg.Go(func() { s.Stream.Stop(10 * time.Second) })
	}
	if s.ControllerManager != nil {
		wg.Go(func() { s.ControllerManager.Stop(10 * time.Second) })
	}
	if s.Node != nil {
		wg.Go(s.Node.Stop)
	}
	wg.Wait()
	s.Node = nil
	if s.Env != nil {
		if err := s.Env.Stop(); err != nil {
			_, _ = fmt.Fprintf(s.opts.out(), "stopping the control plane: %v\n", err)
		}
		s.Env = nil
	}
	for _, d := range s.certDirs {
		_ = os.RemoveAll(d)
	}
	s.certDirs = nil
	for _, c := range s.closers {
		_ = c.Close()
	}
	s.closers = nil
}

// Logger is a convenience for callers that want the stack's progress as a
// logr.Logger.
func Logger(w io.Writer) logr.Logger {
	return zap.New(zap.WriteTo(w), zap.UseDevMode(true))
}
