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

// Command server runs the protocol conformance gateway for other languages'
// tests: it prints one JSON line (conformance.Manifest: url, token, model,
// tokenFile, caFile, env, grant, reserve) and serves until its stdin closes.
// Each further stdin line is a JSON conformance.Command; each gets one JSON
// line back ({"ok":true}, the status, or {"error":…}).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/test/conformance"
)

func main() {
	var cfg conformance.Config
	var risk string
	plain := false
	flag.Int64Var(&cfg.ModelRequests, "model-requests", 4, "working grant: model requests")
	flag.Int64Var(&cfg.ToolCalls, "tool-calls", 10, "working grant: tool calls")
	flag.Int64Var(&cfg.ReserveModelRequests, "reserve-model-requests", 1, "output reserve: model requests")
	flag.Int64Var(&cfg.ReserveToolCalls, "reserve-tool-calls", 2, "output reserve: tool calls")
	flag.StringVar(&risk, "publish-risk", "Medium", "risk of report.publish: Medium (auto-approved) or High (needs an approval)")
	flag.BoolVar(&plain, "plain-http", false, "serve plain HTTP instead of HTTPS")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the token and CA files (default: a temporary one)")
	flag.Parse()
	cfg.PublishRisk, cfg.TLS = v1alpha1.Risk(risk), !plain

	s, err := conformance.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(s.Manifest)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c conformance.Command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		ans, err := s.Do(c)
		if err != nil {
			_ = out.Encode(map[string]string{"error": err.Error()})
			continue
		}
		_ = out.Encode(ans)
	}
}
