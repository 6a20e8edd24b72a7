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

package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// SampleToolHosts are the hosts the samples' http.get fetches
// (config/samples/research-agent-script.yaml): the dev stack's tool server
// allows them when Options.ToolsAllowHosts is empty.
var SampleToolHosts = []string{"en.wikipedia.org", "raft.github.io"}

// startTools starts the reference tool server (cmd/agentrun-tools) on
// loopback, as its own process, when Options.ToolsBinary is set.
func (s *Stack) startTools(ctx context.Context) error {
	if s.opts.ToolsBinary == "" {
		return nil
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hosts := s.opts.ToolsAllowHosts
	if len(hosts) == 0 {
		hosts = SampleToolHosts
	}
	args := make([]string, 0, 3+len(hosts)+len(s.opts.ToolsArgs))
	args = append(args, "--listen="+addr)
	for _, h := range hosts {
		args = append(args, "--allow-host="+h)
	}
	if s.opts.ToolsFakeConfig != "" {
		args = append(args, "--fake-config="+s.opts.ToolsFakeConfig)
		s.ToolsCallsURL = "http://" + addr + "/calls"
	}
	if s.opts.ToolsTokenFile != "" {
		args = append(args, "--token-file="+s.opts.ToolsTokenFile)
	}
	args = append(args, s.opts.ToolsArgs...)
	s.ToolsURL = "http://" + addr + "/mcp"
	s.Tools = &Operator{
		Binary:     s.opts.ToolsBinary,
		Args:       args,
		Env:        []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")},
		LogPath:    filepath.Join(s.LogDir, "tools.log"),
		HealthAddr: addr, // agentrun-tools serves /readyz on its listener
	}
	_, _ = fmt.Fprintf(s.opts.out(), "==> starting agentrun-tools (%s) on %s\n", rel(s.opts.Root, s.opts.ToolsBinary), s.ToolsURL)
	return s.StartTools(ctx)
}

// StartTools starts the tool server process and waits until it is ready
// (again, after Tools.Stop or Tools.Kill: same address, same flags).
func (s *Stack) StartTools(ctx context.Context) error {
	return s.startProcess(ctx, "agentrun-tools", s.Tools, 30*time.Second)
}
