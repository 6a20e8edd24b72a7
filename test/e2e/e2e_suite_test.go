//go:build e2e

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

// Package e2e drives agentrun end to end on the local stack
// (internal/devstack/stack): real etcd and kube-apiserver, the operator
// binary as its own process under its own identity with its webhooks and
// admission policies, agentrun-gateway as its own process (the attempts' only
// door), and attempt pods run by the local node as real agent processes that
// hold only a pod-bound gateway token, with models played by the scripted
// upstream.
//
//	go test -tags=e2e ./test/e2e/ -v -timeout 30m     (make test-e2e)
//
// The stack's state and logs are kept in bin/e2e/ (wiped at the start):
// logs/{operator,gateway,local-node,kube-apiserver,etcd}.log, logs/audit.jsonl
// and pods/<pod>/<container>.log.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/internal/devstack/node"
	"github.com/agentrun-dev/agentrun/internal/devstack/stack"
	"github.com/agentrun-dev/agentrun/test/utils"
)

var (
	ctx    context.Context
	cancel context.CancelFunc
	st     *stack.Stack
	root   string
	dir    string

	// researchAgent is the built cmd/research-agent.
	researchAgent   string
	miniAgent       string
	harnessLauncher string
)

// Images the local node maps in this suite.
const (
	imageResearchAgent = "ghcr.io/agentrun-dev/research-agent:e2e"
	imageMiniAgent     = "e2e.local/miniagent:latest"
	imageShell         = "e2e.local/shell:latest"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "agentrun e2e on the local stack")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(func() { cancel() })
	root = utils.ProjectRoot()
	dir = filepath.Join(root, "bin", "e2e")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	out := GinkgoWriter

	By("building the toolchain, the operator and the agents")
	assets, err := stack.Toolchain(ctx, root, out)
	Expect(err).NotTo(HaveOccurred())
	operator := filepath.Join(dir, "manager")
	Expect(stack.GoBuild(ctx, root, "./cmd", operator, out)).To(Succeed())
	gateway := filepath.Join(dir, "gateway")
	Expect(stack.GoBuild(ctx, root, "./cmd/gateway", gateway, out)).To(Succeed())
	miniAgent = filepath.Join(dir, "miniagent")
	Expect(stack.GoBuild(ctx, root, "./test/e2e/testdata/miniagent", miniAgent, out)).To(Succeed())
	researchAgent = filepath.Join(dir, "research-agent")
	Expect(stack.GoBuild(ctx, root, "./cmd/research-agent", researchAgent, out)).To(Succeed())
	harnessLauncher = filepath.Join(dir, "agentrun-harness")
	Expect(stack.GoBuild(ctx, root, "./cmd/agentrun-harness", harnessLauncher, out)).To(Succeed())
	streamServer := filepath.Join(dir, "agentrun-stream")
	Expect(stack.GoBuild(ctx, root, "./cmd/agentrun-stream", streamServer, out)).To(Succeed())

	By("starting the local stack")
	images := node.ImageMap{
		{Match: "miniagent", Binary: miniAgent},
		{Match: "e2e.local/shell", Binary: "/bin/sh"},
		{Match: "research-agent", Binary: researchAgent},
		// The harness images' entrypoint; the CLIs are found on PATH.
		{Match: "agentrun-harness", Binary: harnessLauncher},
	}
	start := time.Now()
	st, err = stack.Start(ctx, stack.Options{
		Root:           root,
		Assets:         assets,
		Dir:            dir,
		OperatorBinary: operator,
		GatewayBinary:  gateway,
		GatewayArgs:    []string{"--flush-interval=100ms"},
		StreamBinary:   streamServer,
		// Small client queues (32 events) and send buffers, so that the
		// slow-client story fills one.
		StreamArgs: []string{"--subscriber-queue-events=32", "--subscriber-send-buffer=8192"},
		// TokenReviews can be made to fail (interceptors_test.go); the
		// door's cache outlasts the suite, so only the auth interceptor
		// (which never caches) meets such a failure.
		GatewayAPIFaults:     true,
		GatewayTokenCacheTTL: 10 * time.Minute,
		Images:               images,
		Out:                  out,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		By("tearing the stack down; no process may be left behind")
		pids := []int{st.Operator.Pid(), st.Gateway.Pid(), st.Stream.Pid()}
		for _, pid := range st.Node.Processes() {
			pids = append(pids, pid)
		}
		st.Stop()
		for _, pid := range pids {
			if pid > 0 {
				Expect(processAlive(pid)).To(BeFalse(), "process %d outlived the stack", pid)
			}
		}
	})
	_, _ = fmt.Fprintf(GinkgoWriter, "stack up in %s; state and logs in %s\n", time.Since(start).Round(time.Millisecond), dir)
})

// ReportAfterEach points at the logs when a spec fails.
var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		_, _ = fmt.Fprintf(GinkgoWriter, "spec failed; logs in %s/logs and %s/pods\n", dir, dir)
	}
})
