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

// agentrun-dev runs agentrun end to end on one machine, without a cluster or
// containers: etcd and kube-apiserver on loopback, the CRDs, RBAC, admission
// policies and webhooks from config/, the operator binary as its own process,
// and a local node that runs each attempt pod's agent as a local process. It
// then applies the samples, prints every run's phase changes, and keeps
// running until Ctrl-C, which tears everything down. `make dev` runs it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/devstack/node"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
)

type imageFlags []string

func (f *imageFlags) String() string     { return strings.Join(*f, ",") }
func (f *imageFlags) Set(s string) error { *f = append(*f, s); return nil }

type options struct {
	dir          string
	root         string
	imageMap     string
	images       imageFlags
	once         bool
	timeout      time.Duration
	noSamples    bool
	samplesDir   string
	noBuild      bool
	autoApprove  bool
	noLeaderElec bool
	providerURL  string
	providerKey  string
	providerName string
	providerAPI  v1.ModelAPI
	toolsHosts   imageFlags
	toolsFake    string
}

func main() {
	var o options
	flag.StringVar(&o.dir, "dir", "bin/dev", "state directory: kubeconfig, logs/, pods/, built binaries")
	flag.StringVar(&o.root, "root", "", "repository root (default: the directory of go.mod above the working directory)")
	flag.Var(&o.images, "image",
		"map images to a local binary: SUBSTRING=PATH (repeatable; first match wins; before the defaults)")
	flag.StringVar(&o.imageMap, "image-map", "",
		"YAML file with image rules: images: [{match: research-agent, binary: ./path}]")
	flag.BoolVar(&o.once, "exit-when-done", false,
		"exit 0 once every sample run is Terminated (non-zero on timeout); approves requested actions itself")
	flag.BoolVar(&o.once, "once", false, "alias of --exit-when-done")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --exit-when-done: give up after this long")
	flag.BoolVar(&o.noSamples, "no-samples", false, "bring the stack up without applying the samples")
	flag.StringVar(&o.samplesDir, "samples", "", "apply the YAML files of this directory instead of the built-in samples")
	flag.BoolVar(&o.noBuild, "no-build", false, "use the binaries already in --dir instead of building them")
	flag.BoolVar(&o.autoApprove, "auto-approve", false,
		"approve every action a run asks approval for (implied by --exit-when-done)")
	flag.BoolVar(&o.noLeaderElec, "no-leader-elect", false, "run the operator without leader election")
	flag.StringVar(&o.providerURL, "provider-url", "",
		"a real OpenAI-compatible provider (e.g. https://api.openai.com/v1): "+
			"the sample policies also serve it as model \"real\"")
	flag.StringVar(&o.providerKey, "provider-key-file", "",
		"file holding the provider's API key (kept in a Secret only the gateway reads)")
	flag.StringVar(&o.providerName, "provider-model", "gpt-4o-mini", "the provider's model id behind model \"real\"")
	providerAPI := flag.String("provider-api", string(v1.ModelAPIOpenAIChat),
		"the API the --provider-url provider speaks: OpenAIChat, OpenAIResponses or AnthropicMessages "+
			"(model \"real\"'s spec.models[].api)")
	flag.Var(&o.toolsHosts, "tools-allow-host",
		"a host the tool server's http.get may fetch (repeatable; default the samples' hosts: "+
			strings.Join(stack.SampleToolHosts, ", ")+")")
	flag.StringVar(&o.toolsFake, "tools-fake-config", "",
		"also serve these scripted tools from the tool server (toolserver.FakeConfig, docs/tools.md)")
	flag.Parse()
	api, err := parseProviderAPI(*providerAPI)
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "agentrun-dev: %v\n", err)
		os.Exit(2)
	}
	o.providerAPI = api

	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, o)
	os.Exit(code)
}

func run(ctx context.Context, o options) int {
	began := time.Now()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	fail := func(err error) int {
		_, _ = fmt.Fprintf(os.Stderr, "agentrun-dev: %v\n", err)
		return 1
	}

	root, err := findRoot(o.root)
	if err != nil {
		return fail(err)
	}
	dir := o.dir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return fail(err)
	}
	defer unlock()

	// 1. Build what the stack needs.
	assets, err := stack.Toolchain(ctx, root, os.Stdout)
	if err != nil {
		return fail(err)
	}
	bins, err := buildBinaries(ctx, root, dir, o.noBuild)
	if err != nil {
		return fail(err)
	}
	operatorBin, gatewayBin, agentBin, toolsBin, streamBin := bins[0], bins[1], bins[2], bins[3], bins[4]
	harnessBin := bins[5]
	if toolsBin == "" {
		say("note: no %s (--no-build?), so the stack runs no tool server", rel(root, filepath.Join(dir, "agentrun-tools")))
	}
	if o.toolsFake != "" {
		if o.toolsFake, err = filepath.Abs(o.toolsFake); err != nil {
			return fail(err)
		}
	}
	images, err := imageMap(o, agentBin, harnessBin)
	if err != nil {
		return fail(err)
	}
	kubectlLink := filepath.Join(dir, "kubectl")
	_ = os.Remove(kubectlLink)
	_ = os.Symlink(filepath.Join(assets, "kubectl"), kubectlLink)

	// 2. The stack.
	s, err := stack.Start(ctx, stack.Options{
		Root:                  root,
		Assets:                assets,
		Dir:                   dir,
		OperatorBinary:        operatorBin,
		GatewayBinary:         gatewayBin,
		Images:                images,
		Out:                   os.Stdout,
		DisableLeaderElection: o.noLeaderElec,
		ToolsBinary:           toolsBin,
		StreamBinary:          streamBin,
		ToolsAllowHosts:       o.toolsHosts,
		ToolsFakeConfig:       o.toolsFake,
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			say("interrupted")
			return 130
		}
		return fail(err)
	}
	defer func() {
		say("==> tearing down: operator, gateway, tool server, agent processes, local node, kube-apiserver, etcd")
		s.Stop()
		say("    done; nothing left running")
	}()

	relDir := rel(root, dir)
	say("")
	say("The local stack is up (%s since start). Use it with:", time.Since(began).Round(100*time.Millisecond))
	say("")
	say("    export KUBECONFIG=%s", s.Kubeconfig)
	say("    export PATH=%s:$PATH    # kubectl %s", dir, filepath.Join(assets, "kubectl"))
	say("    kubectl get rr -w")
	say("    kubectl get agentrun        # every agentrun object")
	say("    kubectl logs <pod>          # an agent's output (also in %s/pods/<ns>_<pod>_<uid>/<container>.log)", relDir)
	say("")
	say("Gateway: %s (the agents' only door: %s/v1 for models, %s/agentrun/v1/self for facts; CA %s)",
		s.GatewayURL, s.GatewayURL, s.GatewayURL, rel(root, s.GatewayCAFile))
	say("Scripted upstream (the samples' model provider): %s", s.UpstreamURL)
	if s.ToolsURL != "" {
		say("Tool server (MCP, for a RuntimePolicy's spec.toolServers[].url; ${AGENTRUN_DEV_TOOLS} in --samples): %s",
			s.ToolsURL)
	}
	if s.ToolsCallsURL != "" {
		say("    its scripted tools' calls: curl %s", s.ToolsCallsURL)
	}
	say("Logs: %s/logs/{operator,gateway,tools,local-node,kube-apiserver,etcd}.log   metrics: %s, %s",
		relDir, s.MetricsURL, s.GatewayMetricsURL)
	say("Audit: %s (the gateway's audit interceptor, one JSON line per tool call)", rel(root, s.AuditLog))
	if s.StreamURL != "" {
		page, err := webPage(ctx, s)
		if err != nil {
			return fail(err)
		}
		say("Run stream: open %s", page)
		say("    (the runs of namespace default, as service account default/agentrun-dev-viewer; SSE: %s%s)",
			s.StreamURL, "/apis/stream.agentrun.dev/v1/namespaces/default/researchruns/<run>/events")
	}
	say("Images: %s", images)
	say("")

	if o.noSamples {
		say("No samples applied (--no-samples). Ctrl-C to stop.")
		<-ctx.Done()
		return 0
	}
	samples, err := loadSamples(o.samplesDir, map[string]string{
		"AGENTRUN_DEV_UPSTREAM": s.UpstreamURL,
		"AGENTRUN_DEV_TOOLS":    s.ToolsURL,
	})
	if err != nil {
		return fail(err)
	}
	if samples, err = withExamples(ctx, samples, root, s.UpstreamURL); err != nil {
		return fail(err)
	}
	if o.providerURL != "" {
		if samples, err = withProvider(ctx, s, samples, o); err != nil {
			return fail(err)
		}
		say("Provider %s (%s) serves model \"real\" (%s) to the sample policies; "+
			"run the reference agent with --provider=openai --model=real",
			o.providerURL, o.providerAPI, o.providerName)
	}
	w := &watcher{s: s, autoApprove: o.autoApprove || o.once, began: began, out: os.Stdout}
	if err := w.apply(ctx, samples); err != nil {
		return fail(err)
	}
	if o.once {
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		if err := w.watch(ctx, true); err != nil {
			return fail(err)
		}
		w.summary(ctx)
		showExampleOutput(dir, rel(root, dir), 2)
		return w.exitCode()
	}
	say("Watching runs; Ctrl-C to stop.")
	if err := w.watch(ctx, false); err != nil && ctx.Err() == nil {
		return fail(err)
	}
	return 0
}

// buildBinaries builds the manager, the gateway, the research agent, the
// tool server, the stream server and the harness launcher into dir (unless noBuild), returning
// their paths in that order; "" for an optional one (tools, stream, harness) that is
// not there.
func buildBinaries(ctx context.Context, root, dir string, noBuild bool) ([]string, error) {
	pkgs := []struct{ pkg, name string }{
		{"./cmd", "manager"}, {"./cmd/gateway", "gateway"}, {"./cmd/research-agent", "research-agent"},
		{"./cmd/agentrun-tools", "agentrun-tools"}, {"./cmd/agentrun-stream", "agentrun-stream"},
		{"./cmd/agentrun-harness", "agentrun-harness"},
	}
	out := make([]string, 0, len(pkgs))
	for i, p := range pkgs {
		bin := filepath.Join(dir, p.name)
		if !noBuild {
			if err := stack.GoBuild(ctx, root, p.pkg, bin, os.Stdout); err != nil {
				return nil, err
			}
		}
		if _, err := os.Stat(bin); err != nil && i >= 3 {
			bin = ""
		}
		out = append(out, bin)
	}
	return out, nil
}

// webPage is the run stream's page for namespace default, opened with a
// viewer's token (in the fragment: the browser never sends it to a server
// log, the page sends it as a bearer token).
func webPage(ctx context.Context, s *stack.Stack) (string, error) {
	token, err := s.ViewerToken(ctx, "default", "agentrun-dev-viewer")
	if err != nil {
		return "", err
	}
	return s.StreamURL + "/?namespace=default#token=" + token, nil
}

// imageMap is --image rules, then the --image-map file, then the default
// rules: any image whose name contains "research-agent" runs the built
// agent, and "agentrun-harness" the harness launcher (spec.harness).
func imageMap(o options, agentBin, harnessBin string) (node.ImageMap, error) {
	var m node.ImageMap
	for _, s := range o.images {
		r, err := node.ParseImageRule(s)
		if err != nil {
			return nil, err
		}
		m = append(m, r)
	}
	if o.imageMap != "" {
		f, err := node.LoadImageMap(o.imageMap)
		if err != nil {
			return nil, err
		}
		m = append(m, f...)
	}
	m = append(m, node.ImageRule{Match: "research-agent", Binary: agentBin})
	if harnessBin != "" {
		m = append(m, node.ImageRule{Match: "agentrun-harness", Binary: harnessBin})
	}
	return m, nil
}

// findRoot returns dir, or the nearest directory above the working
// directory whose go.mod is this module's.
func findRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/agentrun-dev/agentrun\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("run agentrun-dev inside the agentrun repository, or pass --root")
		}
	}
}

// lockDir makes sure only one agentrun-dev uses dir at a time.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("another agentrun-dev is using %s (stop it, or pass --dir)", dir)
	}
	return func() { _ = f.Close() }, nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
