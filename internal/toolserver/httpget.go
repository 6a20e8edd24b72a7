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
	// AllowHosts are the hosts it may fetch: "host" (any port), "host:port",
	// or "*.example.org" (any subdomain of example.org, not example.org
	// itself). Empty allows nothing.
	AllowHosts []string
	// Client fetches the pages (default: a client with Timeout). Redirects
	// are followed only to allowed hosts.
	Client *http.Client
	// Timeout bounds one fetch when Client is nil (default 20s).
	Timeout time.Duration
	// UserAgent is sent with every request (default "agentrun-tools").
	UserAgent string
}

type httpGet struct {
	allow  []string
	client *http.Client
	ua     string
}

func newHTTPGet(o HTTPGetOptions) (*httpGet, error) {
	g := &httpGet{ua: o.UserAgent}
	if g.ua == "" {
		g.ua = "agentrun-tools"
	}
	for _, a := range o.AllowHosts {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == "" {
			continue
		}
		if strings.Contains(a, "/") || strings.Contains(a, "*") && (!strings.HasPrefix(a, "*.") || strings.Count(a, "*") > 1) {
			return nil, fmt.Errorf("toolserver: allow-host rule %q: want host, host:port or *.domain", a)
		}
		g.allow = append(g.allow, a)
	}
	var c http.Client
	if o.Client != nil {
		c = *o.Client
	} else {
		c.Timeout = o.Timeout
		if c.Timeout <= 0 {
			c.Timeout = 20 * time.Second
		}
	}
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if rule := Allowed(g.allow, req.URL); rule == "" {
			return fmt.Errorf("redirect to %s: %w", req.URL.Host, errNotAllowed)
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
	g.client = &c
	return g, nil
}

var errNotAllowed = errors.New("host not in the allowlist")

// Allowed returns the rule of allowlist that lets u's host be fetched, or ""
// when none does. Rules are "host" (any port), "host:port" and
// "*.example.org" (subdomains only); matching ignores case.
func Allowed(allowlist []string, u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	hostPort := strings.ToLower(u.Host)
	if host == "" {
		return ""
	}
	for _, a := range allowlist {
		rule := strings.ToLower(strings.TrimSpace(a))
		switch {
		case rule == "":
		case rule == host || rule == hostPort:
			return a
		case strings.HasPrefix(rule, "*.") && strings.HasSuffix(host, rule[1:]):
			return a
		}
	}
	return ""
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
	return "allowed: " + strings.Join(g.allow, ", ") + " (rules are host, host:port or *.domain)"
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
	if Allowed(g.allow, u) == "" {
		return errorResult("http.get: host %s is not allowed; %s", u.Host, g.rules()), nil
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
