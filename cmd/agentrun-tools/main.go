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

// Command agentrun-tools is agentrun's reference MCP tool server: the
// gateway calls it (a RuntimePolicy's spec.toolServers) over streamable HTTP
// at /mcp. It serves http.get over an allowlist of hosts (--allow-host) and,
// with --fake-config, the scripted tools of a toolserver.Fake (for e2e and
// benchmarks; GET /calls shows what they were called with). See
// docs/tools.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun-dev/agentrun/internal/toolserver"
)

type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }
func (f *listFlag) Set(s string) error {
	for h := range strings.SplitSeq(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			*f = append(*f, h)
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		_, _ = fmt.Fprintf(os.Stderr, "agentrun-tools: %v\n", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully. ready, when set,
// gets the address listened on once the server accepts connections.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("agentrun-tools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen, fakeConfig, tokenFile string
		allow, clusterCIDRs           listFlag
		httpGet                       bool
		fetchTimeout, grace           time.Duration
	)
	fs.StringVar(&listen, "listen", ":8080", "address to serve MCP (/mcp), /healthz, /readyz and, with a fake, /calls on")
	fs.Var(&allow, "allow-host",
		"a rule of what http.get may fetch: host, host:port, *.domain, an address (ip, ip:port) or a CIDR; a rule "+
			"without a port allows 80 and 443 (repeatable, or comma-separated); none allows nothing")
	fs.Var(&clusterCIDRs, "cluster-cidr",
		"a pod or service CIDR of the cluster, refused to http.get like loopback, link-local and private addresses "+
			"unless an --allow-host rule names it (repeatable, or comma-separated)")
	fs.BoolVar(&httpGet, "http-get", true, "serve the http.get tool")
	fs.DurationVar(&fetchTimeout, "fetch-timeout", 20*time.Second, "bound of one http.get fetch")
	fs.StringVar(&fakeConfig, "fake-config", "",
		"JSON or YAML file of scripted tools to serve as well (toolserver.FakeConfig; see docs/tools.md)")
	fs.StringVar(&tokenFile, "token-file", "",
		"file holding a bearer token every /mcp and /calls request must carry (401 otherwise)")
	fs.DurationVar(&grace, "shutdown-grace", 10*time.Second, "how long calls under way may finish after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	opts := toolserver.Options{Version: "dev"}
	if httpGet {
		cidrs := make([]netip.Prefix, 0, len(clusterCIDRs))
		for _, c := range clusterCIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return fmt.Errorf("--cluster-cidr %q: want a CIDR such as 10.96.0.0/12: %w", c, err)
			}
			cidrs = append(cidrs, p.Masked())
		}
		opts.HTTPGet = &toolserver.HTTPGetOptions{AllowHosts: allow, ClusterCIDRs: cidrs, Timeout: fetchTimeout}
	}
	if fakeConfig != "" {
		cfg, err := toolserver.LoadFakeConfig(fakeConfig)
		if err != nil {
			return fmt.Errorf("--fake-config: %w", err)
		}
		if opts.Fake, err = toolserver.NewFake(cfg.Tools...); err != nil {
			return fmt.Errorf("--fake-config %s: %w", fakeConfig, err)
		}
	}
	if tokenFile != "" {
		data, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		if opts.Token = strings.TrimSpace(string(data)); opts.Token == "" {
			return fmt.Errorf("--token-file %s is empty", tokenFile)
		}
	}
	srv, err := toolserver.New(opts)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("serving MCP", "url", "http://"+ln.Addr().String()+toolserver.PathMCP, "tools", srv.Tools(),
		"allowHosts", []string(allow), "clusterCIDRs", []string(clusterCIDRs), "token", opts.Token != "", "fake", fakeConfig)
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", grace)
	if opts.Fake != nil {
		opts.Fake.Close() // a hanging call would otherwise hold the shutdown for the whole grace
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
