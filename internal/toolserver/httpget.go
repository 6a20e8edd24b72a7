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

package toolserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolHTTPGet is the name of the page-fetching tool.
const ToolHTTPGet = "http.get"

// MaxBodyBytes bounds the body http.get returns.
const MaxBodyBytes = 64 << 10

// JSON schema words.
const (
	schemaType   = "type"
	schemaObject = "object"
)

// maxRedirects bounds the redirects http.get follows (each to an allowed host).
const maxRedirects = 5

// HTTPGetOptions configures http.get.
type HTTPGetOptions struct {
	// AllowHosts are the rules of what it may fetch (empty allows nothing):
	//   - "host": that host on port 80 or 443;
	//   - "host:port": that host on that port;
	//   - "*.example.org", "*.example.org:port": any subdomain of example.org
	//     (not example.org itself), on 80/443 or on that port;
	//   - an address ("10.0.0.5", "10.0.0.5:8080", "[fd00::1]:8443") or a
	//     CIDR ("10.1.0.0/16", ports 80/443): URLs naming it, and
	//     connections to it whatever name resolved to it.
	// Matching ignores case.
	AllowHosts []string
	// ClusterCIDRs are the cluster's pod and service ranges: connections to
	// them are refused like those to private ranges, unless a rule names the
	// address or a CIDR holding it.
	ClusterCIDRs []netip.Prefix
	// Resolver resolves host names (default net.DefaultResolver). Whatever
	// it answers, the address connected to is checked.
	Resolver Resolver
	// Timeout bounds one fetch (default 20s).
	Timeout time.Duration
	// UserAgent is sent with every request (default "agentrun-tools").
	UserAgent string
}

// Resolver resolves a host name to its addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

type httpGet struct {
	allow  []string // the rules as written, lower case
	parsed []allowRule
	client *http.Client
	ua     string
}

func newHTTPGet(o HTTPGetOptions) (*httpGet, error) {
	g := &httpGet{ua: o.UserAgent}
	if g.ua == "" {
		g.ua = "agentrun-tools"
	}
	rules, err := parseRules(o.AllowHosts)
	if err != nil {
		return nil, err
	}
	g.parsed = rules
	for _, r := range rules {
		g.allow = append(g.allow, r.text)
	}
	for _, p := range o.ClusterCIDRs {
		if !p.IsValid() {
			return nil, fmt.Errorf("toolserver: cluster CIDR %v is not a valid prefix", p)
		}
	}
	dial := &guardedDialer{
		resolver: o.Resolver,
		guard:    addressGuard{named: namedAddresses(rules), cluster: o.ClusterCIDRs},
	}
	if dial.resolver == nil {
		dial.resolver = net.DefaultResolver
	}
	dial.dialer = net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: dial.guard.control}
	// No proxy: the address checked must be the one the page comes from.
	tr := &http.Transport{
		DialContext:           dial.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	c := http.Client{Transport: tr, Timeout: o.Timeout}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Second
	}
	// A redirect is checked against the rules like the first URL, and dials
	// through the same guard.
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if matchRules(rules, req.URL) == "" {
			return fmt.Errorf("redirect to %s: %w", req.URL.Host, errNotAllowed)
		}
		return nil
	}
	g.client = &c
	return g, nil
}

var errNotAllowed = errors.New("host or port not in the allowlist")

// Allowed returns the rule of allowlist that lets u be fetched, or "" when
// none does (a rule that does not parse matches nothing). The rules are
// HTTPGetOptions.AllowHosts'.
func Allowed(allowlist []string, u *url.URL) string {
	var rules []allowRule
	for _, a := range allowlist {
		if r, ok, err := parseRule(a); ok && err == nil {
			rules = append(rules, r)
		}
	}
	return matchRules(rules, u)
}

func (g *httpGet) tool() *mcp.Tool {
	return &mcp.Tool{
		Name:        ToolHTTPGet,
		Description: "Fetch a web page from an allow-listed host; returns the status and up to 64 KiB of the body.",
		InputSchema: map[string]any{
			schemaType: schemaObject,
			"properties": map[string]any{
				"url": map[string]any{schemaType: "string", "description": "an http(s) URL"},
			},
			"required":             []string{"url"},
			"additionalProperties": false,
		},
		Annotations: &mcp.ToolAnnotations{Title: "Fetch a page", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(true)},
	}
}

func (g *httpGet) rules() string {
	if len(g.allow) == 0 {
		return "the allowlist is empty, so no host is allowed"
	}
	return "allowed: " + strings.Join(g.allow, ", ") + " (rules are host, host:port, *.domain, an address or a CIDR; a rule without a port allows 80 and 443)"
}

func (g *httpGet) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		URL string `json:"url"`
	}
	if raw := req.Params.Arguments; len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return errorResult("http.get: arguments must be an object with a string url: %v", err), nil
		}
	}
	u, err := url.Parse(strings.TrimSpace(args.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errorResult("http.get needs an absolute http(s) URL, not %q", args.URL), nil
	}
	if matchRules(g.parsed, u) == "" {
		return errorResult("http.get: %s is not allowed; %s", hostPort(u), g.rules()), nil
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return errorResult("http.get: %v", err), nil
	}
	hreq.Header.Set("User-Agent", g.ua)
	resp, err := g.client.Do(hreq)
	if err != nil {
		var nerr net.Error
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err // its text repeats the method and the URL
		}
		switch {
		case errors.Is(err, errNotAllowed):
			return errorResult("http.get: GET %s: %v; %s", u, err, g.rules()), nil
		case errors.Is(err, errAddressRefused):
			return errorResult("http.get: GET %s: %v", u, err), nil
		case errors.As(err, &nerr) && nerr.Timeout():
			return errorResult("http.get: GET %s timed out: %v", u, err), nil
		default:
			return errorResult("http.get: GET %s: unreachable: %v", u, err), nil
		}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return errorResult("http.get: GET %s: reading the body: %v", u, err), nil
	}
	if resp.StatusCode >= 400 {
		return errorResult("http.get: GET %s: %s", u, resp.Status), nil
	}
	status := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if len(body) > MaxBodyBytes {
		body = body[:MaxBodyBytes]
		status += " (body truncated to 64 KiB)"
	}
	return textResult(status + "\n" + string(body)), nil
}
