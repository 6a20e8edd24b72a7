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

// miniagent is the smallest agent that completes a run, written against the
// gateway's raw HTTP API (no SDK, only the standard library, as an agent in
// any language would be) so the local stack can be tested on its own: it
// makes one model request, plans one section and proposes finish; once
// Finalizing it publishes the section (report.publish, then the section) and
// settles, and exits 0. With --hang it only heartbeats until the run ends.
// With MINIAGENT_TURN set (a scripted upstream turn as JSON) its model
// request is streamed and carries that turn, so a test chooses what the
// model streams (reasoning, text, pacing).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	// Flags meant for the reference agent (--provider, --script...) are
	// accepted and ignored.
	if err := run(slices.Contains(os.Args[1:], "--hang")); err != nil {
		fmt.Println("miniagent:", err)
		os.Exit(1)
	}
}

type gateway struct {
	url, tokenFile string
	hc             *http.Client
}

func (g *gateway) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, _ := json.Marshal(in)
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, body)
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(g.tokenFile)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, raw)
	}
	if b, ok := out.(*bytes.Buffer); ok {
		b.Write(raw)
		return nil
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// model makes the one model request: streamed, with MINIAGENT_TURN's
// scripted turn, when that is set.
func (g *gateway) model(ctx context.Context) error {
	req := map[string]any{"model": "scripted", "messages": []map[string]string{{"role": "user", "content": "Summarize."}}}
	turn := os.Getenv("MINIAGENT_TURN")
	if turn == "" {
		var cc map[string]any
		return g.do(ctx, http.MethodPost, "/v1/chat/completions", req, &cc)
	}
	req["stream"], req["agentrun_scripted"] = true, json.RawMessage(turn)
	var body bytes.Buffer
	if err := g.do(ctx, http.MethodPost, "/v1/chat/completions", req, &body); err != nil {
		return err
	}
	if !strings.Contains(body.String(), "data: [DONE]") {
		return fmt.Errorf("the streamed answer ended without [DONE]")
	}
	return nil
}

type self struct {
	Phase      string `json:"phase"`
	Finalizing bool   `json:"finalizing"`
	Superseded bool   `json:"superseded"`
}

func run(hang bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g := &gateway{url: os.Getenv("AGENTRUN_GATEWAY_URL"), tokenFile: os.Getenv("AGENTRUN_TOKEN_FILE"), hc: &http.Client{Timeout: time.Minute}}
	if ca := os.Getenv("AGENTRUN_GATEWAY_CA_FILE"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		g.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	fmt.Printf("miniagent: pod %s gateway %s token file %s\n", os.Getenv("POD_NAME"), g.url, g.tokenFile)
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil || os.Getenv("AGENTRUN_KUBECONFIG") != "" {
		return fmt.Errorf("this pod holds an API-server token; it must hold none")
	}
	waitPhase := func(done func(self) bool) (self, error) {
		for {
			var s self
			if err := g.do(ctx, http.MethodGet, "/agentrun/v1/self", nil, &s); err != nil {
				return s, err
			}
			if done(s) {
				return s, nil
			}
			select {
			case <-ctx.Done():
				return s, ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	if hang {
		_, err := waitPhase(func(s self) bool { return s.Phase == "Terminated" })
		if err != nil && strings.Contains(err.Error(), "HTTP 409") {
			return nil // the gateway serves an ended attempt nothing
		}
		return err
	}
	fmt.Println("miniagent: one model request, a plan, then finish")
	if err := g.model(ctx); err != nil {
		return fmt.Errorf("model request: %w", err)
	}
	if err := g.do(ctx, http.MethodPut, "/agentrun/v1/self/report/plan", map[string]any{"sections": []string{"Summary"}}, nil); err != nil {
		return err
	}
	if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/steps", map[string]any{"progress": true}, nil); err != nil {
		return err
	}
	if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/finish", map[string]any{}, nil); err != nil {
		return err
	}
	s, err := waitPhase(func(s self) bool { return s.Finalizing || s.Phase == "Terminated" })
	if err != nil {
		return err
	}
	if s.Finalizing {
		args := map[string]any{"section": "Summary", "content": "# Summary\n\nminiagent was here.\n"}
		var call struct {
			ID string `json:"id"`
		}
		if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/toolcalls", map[string]any{"tool": "report.publish", "arguments": args}, &call); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
		if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/report/sections",
			map[string]any{"callID": call.ID, "section": args["section"], "content": args["content"]}, nil); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
		if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/toolcalls/"+call.ID+"/outcome", map[string]any{}, nil); err != nil {
			return err
		}
		var settled map[string]any
		if err := g.do(ctx, http.MethodPost, "/agentrun/v1/self/settle", map[string]any{}, &settled); err != nil {
			return fmt.Errorf("settling: %w", err)
		}
		fmt.Println("miniagent: settled", settled["settlement"])
	}
	// Exit once settled: the run ends after the pod has stopped.
	fmt.Println("miniagent: done")
	return nil
}
