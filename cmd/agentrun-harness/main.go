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

// Command agentrun-harness is the entrypoint of a harness image (a
// ResearchRun's spec.harness): it reads the attempt from the gateway, starts
// Claude Code or Codex pointed at the gateway's doors with the pod's token,
// shows the gateway the attempt is alive while the CLI works, runs one
// finalize round from the output reserve when the run's budget ran out
// before anything was published, and writes the CLI's result line to the
// container's termination message. It exits with the CLI's exit code: a
// failed CLI is a fact for the lifecycle, not the launcher's to judge.
//
//	agentrun-harness [-- CLI-ARGS...]   run the harness of $AGENTRUN_HARNESS
//	agentrun-harness token              print the current gateway token
//	agentrun-harness mcp-headers        print the tool door's headers (JSON)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/harness"
	"github.com/agentrun-dev/agentrun/internal/runpod"
	"github.com/agentrun-dev/agentrun/pkg/agent"
	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "token", "mcp-headers":
			if err := printToken(args[0]); err != nil {
				fmt.Fprintln(os.Stderr, "agentrun-harness:", err)
				os.Exit(1)
			}
			return
		case "--":
			args = args[1:]
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, args))
}

// printToken prints the gateway token (the CLIs' credential helpers run it,
// so each reads the kubelet's latest rotation).
func printToken(what string) error {
	tok, err := readToken()
	if err != nil {
		return err
	}
	if what == "token" {
		fmt.Println(tok)
		return nil
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]string{"Authorization": "Bearer " + tok})
}

func readToken() (string, error) {
	f := os.Getenv(gatewayapi.EnvTokenFile)
	if f == "" {
		return "", fmt.Errorf("no token: $%s is not set", gatewayapi.EnvTokenFile)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "agentrun-harness: "+format+"\n", a...)
}

// run launches the CLI and returns the exit code to exit with.
func run(ctx context.Context, extra []string) int {
	started := time.Now().UTC()
	a, err := agent.New(agent.ConfigFromEnv())
	if err != nil {
		logf("%v", err)
		return 2
	}
	view, err := attempt(ctx, a)
	if err != nil {
		logf("read the attempt: %v", err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		logf("%v", err)
		return 2
	}
	model := os.Getenv(runpod.EnvHarnessModel)
	if model == "" && len(view.Models) > 0 {
		model = view.Models[0]
	}
	// The root filesystem is read-only: home and work live in the scratch
	// emptyDir ($TMPDIR, else /tmp).
	s := harness.Setup{
		Type:    v1alpha1.HarnessType(os.Getenv(runpod.EnvHarness)),
		Gateway: strings.TrimSuffix(os.Getenv(gatewayapi.EnvGatewayURL), "/"),
		Model:   model, Mode: view.Mode, Goal: view.Goal, Launcher: self, Args: extra,
		CAFile: os.Getenv(gatewayapi.EnvCAFile), DisallowedTools: view.HarnessDisallowedTools,
		Home: filepath.Join(os.TempDir(), "agentrun-home"), Work: filepath.Join(os.TempDir(), "work"),
	}
	inv, err := harness.Launch(s)
	if err != nil {
		logf("$%s: %v", runpod.EnvHarness, err)
		return 2
	}
	hb, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go heartbeat(hb, a, view.HeartbeatSeconds)

	res := harness.Result{Harness: s.Type, StartedAt: &started}
	logf("starting %s (%s, model %q, mode %s, disallowed %v)", inv.Name, s.Type, model, view.Mode, s.DisallowedTools)
	res.ExitCode = invoke(ctx, s, inv, &res)
	if v, err := settled(ctx, a, res); err == nil && harness.NeedsFinalize(v, res) {
		logf("the run is finalizing and nothing is published: one round from the output reserve")
		res.FinalizeRounds = 1
		res.ExitCode = invoke(ctx, s, harness.Finalize(s, res), &res)
	}
	stopHB()
	if res.ExitCode != 0 {
		// A fact for the lifecycle (it changes no phase by itself).
		msg := fmt.Sprintf("%s exited %d (%s %s): %s", inv.Name, res.ExitCode, res.Subtype, res.TerminalReason, res.Message)
		err := a.RecordFault(context.WithoutCancel(ctx), v1alpha1.FaultScopeAgent, "HarnessExited", false, msg)
		if err != nil {
			logf("record the exit: %v", err)
		}
	}
	line, _ := json.Marshal(res)
	fmt.Printf("agentrun-harness result: %s\n", line)
	if p := os.Getenv(runpod.EnvTerminationLog); p != "" {
		if err := os.WriteFile(p, line, 0o644); err != nil {
			logf("termination message: %v", err)
		}
	}
	return res.ExitCode
}

// attempt reads the attempt's view, waiting while the operator has not yet
// recorded this pod (not_an_attempt) or the gateway cannot reach the API
// server, for up to two minutes.
func attempt(ctx context.Context, a *agent.Agent) (gatewayapi.Attempt, error) {
	deadline := time.Now().Add(2 * time.Minute)
	wait := 200 * time.Millisecond
	for {
		v, err := a.Fetch(ctx)
		var ge *agent.GatewayError
		retry := err != nil && (!errors.As(err, &ge) ||
			ge.Code == gatewayapi.CodeNotAnAttempt || ge.Code == gatewayapi.CodeNotPersisted)
		if !retry || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// settled is the attempt's view once the CLI has exited: when the gateway
// refused it at the working grant, the operator's Finalizing (or the run's
// end) is waited for, for up to 30 s.
func settled(ctx context.Context, a *agent.Agent, res harness.Result) (gatewayapi.Attempt, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := a.Fetch(ctx)
		if err != nil || !harness.RefusedAtGrant(res) || v.Finalizing || v.Phase == v1alpha1.PhaseTerminated ||
			v.Superseded || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func heartbeat(ctx context.Context, a *agent.Agent, seconds int64) {
	iv := time.Duration(seconds) * time.Second
	if iv <= 0 {
		iv = agent.DefaultHeartbeatInterval
	}
	for {
		if err := a.Heartbeat(ctx); err != nil && ctx.Err() == nil {
			logf("heartbeat: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(iv/2, 500*time.Millisecond)):
		}
	}
}

// invoke runs one invocation of the CLI: its output goes to the pod's log,
// and each line is read into res. SIGTERM is passed on.
func invoke(ctx context.Context, s harness.Setup, inv harness.Invocation, res *harness.Result) int {
	for _, dir := range []string{s.Home, s.Work} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			logf("%v", err)
			return 2
		}
	}
	for p, content := range inv.Files {
		err := os.MkdirAll(filepath.Dir(p), 0o700)
		if err == nil {
			err = os.WriteFile(p, []byte(content), 0o600)
		}
		if err != nil {
			logf("%v", err)
			return 2
		}
	}
	cmd := exec.Command(inv.Name, inv.Args...)
	cmd.Dir, cmd.Stdin, cmd.Stderr = s.Work, nil, os.Stderr
	cmd.Env = append(os.Environ(), inv.Env...)
	if tok, err := readToken(); err == nil {
		cmd.Env = append(cmd.Env, harness.EnvMCPToken+"="+tok)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf("%v", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		logf("start %s: %v", inv.Name, err)
		return 127
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-stopped:
		}
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = os.Stdout.Write(append(line, '\n'))
		res.Read(line)
	}
	_, _ = io.Copy(os.Stdout, out)
	err = cmd.Wait()
	close(stopped)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	logf("%s: %v", inv.Name, err)
	return 1
}
