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
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAddressClass(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	got := map[string]string{}
	want := map[string]string{
		"169.254.169.254":  "metadata service",
		"fd00:ec2::254":    "metadata service",
		"100.100.100.200":  "metadata service",
		"127.0.0.1":        "loopback",
		"127.9.9.9":        "loopback",
		"::1":              "loopback",
		"::ffff:127.0.0.1": "loopback",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"169.254.10.1":     "link-local",
		"fe80::1":          "link-local",
		"224.0.0.1":        "multicast",
		"ff02::1":          "multicast",
		"10.96.0.1":        "private",
		"172.16.5.4":       "private",
		"192.168.1.1":      "private",
		"::ffff:10.0.0.1":  "private",
		"fd12:3456::1":     "private",
		"100.64.0.1":       "shared address space (CGNAT)",
		"0.1.2.3":          "this network",
		"198.18.0.1":       "benchmarking",
		"255.255.255.255":  "reserved",
		"64:ff9b::a00:1":   "NAT64",
		"::7f00:1":         "IPv4-compatible",
		"203.0.113.9":      "cluster CIDR 203.0.113.0/24",
		"8.8.8.8":          "",
		"2606:4700::1111":  "",
	}
	for a := range want {
		got[a] = AddressClass(netip.MustParseAddr(a), cluster)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AddressClass (-want +got):\n%s", diff)
	}
}

// standIn is a server on 127.0.0.1 that counts the requests it answers.
type standIn struct {
	port string
	hits atomic.Int64
}

func newStandIn(t *testing.T, body string) *standIn {
	t.Helper()
	s := &standIn{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		_, _ = fmt.Fprint(w, body)
	}))
	t.Cleanup(ts.Close)
	_, s.port, _ = net.SplitHostPort(ts.Listener.Addr().String())
	return s
}

// getWith calls http.get through a tool server built with opts.
func getWith(t *testing.T, opts HTTPGetOptions, u string) (bool, string) {
	t.Helper()
	cs := mustConnect(t, serve(t, Options{HTTPGet: &opts}), nil)
	res := call(t, cs, ToolHTTPGet, map[string]any{"url": u})
	return res.IsError, text(res)
}

// An allow-listed name that resolves to a private address (here a loopback
// stand-in for the cloud metadata service; DNS rebinding does the same) is
// refused at connect time: the production client never sends the request.
func TestHTTPGetRefusesAnAllowedNameThatResolvesToAPrivateAddress(t *testing.T) {
	metadata := newStandIn(t, `{"AccessKeyId":"stolen"}`)
	for name, opts := range map[string]HTTPGetOptions{
		"a DNS answer": {AllowHosts: []string{"metadata.test:" + metadata.port}, Resolver: resolveTo(netip.MustParseAddr("127.0.0.1"))},
		"an IPv4-mapped DNS answer": {
			AllowHosts: []string{"metadata.test:" + metadata.port}, Resolver: resolveTo(netip.MustParseAddr("::ffff:127.0.0.1")),
		},
		"the system resolver": {AllowHosts: []string{"metadata.test:" + metadata.port, "localhost:" + metadata.port}},
		"a rule naming another port of the address": {
			AllowHosts: []string{"metadata.test:" + metadata.port, "127.0.0.1:1"}, Resolver: resolveTo(netip.MustParseAddr("127.0.0.1")),
		},
		"a rule naming the address without a port (80/443)": {
			AllowHosts: []string{"metadata.test:" + metadata.port, "127.0.0.1"}, Resolver: resolveTo(netip.MustParseAddr("127.0.0.1")),
		},
	} {
		t.Run(name, func(t *testing.T) {
			host := "metadata.test"
			if opts.Resolver == nil {
				host = "localhost" // /etc/hosts: no test double at all
			}
			isErr, msg := getWith(t, opts, "http://"+host+":"+metadata.port+"/latest/meta-data/iam/security-credentials/")
			if !isErr || !strings.Contains(msg, "refusing to connect to 127.0.0.1:"+metadata.port+" (loopback)") &&
				!strings.Contains(msg, "refusing to connect to [::1]:"+metadata.port+" (loopback)") {
				t.Fatalf("got IsError=%v %q, want the address refused", isErr, msg)
			}
			if strings.Contains(msg, "stolen") || metadata.hits.Load() != 0 {
				t.Fatalf("the stand-in answered %d requests: %q", metadata.hits.Load(), msg)
			}
		})
	}
}

// A host rule allows ports 80 and 443 only; another port must be named.
func TestHTTPGetRefusesPortsNoRuleNames(t *testing.T) {
	page := newStandIn(t, "redis says hi")
	resolver := resolveTo(netip.MustParseAddr("127.0.0.1"))
	isErr, msg := getWith(t, HTTPGetOptions{AllowHosts: []string{"cache.test", "127.0.0.1:" + page.port}, Resolver: resolver},
		"http://cache.test:"+page.port+"/")
	if !isErr || !strings.Contains(msg, "cache.test:"+page.port+" is not allowed") || page.hits.Load() != 0 {
		t.Fatalf("got IsError=%v %q after %d requests, want the port refused", isErr, msg, page.hits.Load())
	}
	isErr, msg = getWith(t, HTTPGetOptions{AllowHosts: []string{"cache.test:" + page.port, "127.0.0.1:" + page.port}, Resolver: resolver},
		"http://cache.test:"+page.port+"/")
	if isErr || msg != "HTTP 200\nredis says hi" {
		t.Fatalf("a rule naming the port: got IsError=%v %q", isErr, msg)
	}
}

// A redirect goes through the same checks: to an allowed name whose address
// is private, it is refused at connect time; a rule naming the address
// allows it.
func TestHTTPGetRefusesARedirectToAPrivateAddress(t *testing.T) {
	public := newStandIn(t, "public")
	private := newStandIn(t, "the internal admin page")
	resolver := resolveTo(netip.MustParseAddr("127.0.0.1"))
	rules := []string{"docs.test:" + public.port, "127.0.0.1:" + public.port, "internal.test:" + private.port}
	u := "http://docs.test:" + public.port + "/?to=" + url.QueryEscape("http://internal.test:"+private.port+"/admin")

	isErr, msg := getWith(t, HTTPGetOptions{AllowHosts: rules, Resolver: resolver}, u)
	if !isErr || !strings.Contains(msg, "refusing to connect to 127.0.0.1:"+private.port+" (loopback)") {
		t.Fatalf("got IsError=%v %q, want the redirect's address refused", isErr, msg)
	}
	if public.hits.Load() != 1 || private.hits.Load() != 0 {
		t.Fatalf("public answered %d, private %d requests", public.hits.Load(), private.hits.Load())
	}

	// A rule naming the address (and port) lets it be reached.
	isErr, msg = getWith(t, HTTPGetOptions{AllowHosts: append(rules, "127.0.0.1:"+private.port), Resolver: resolver}, u)
	if isErr || msg != "HTTP 200\nthe internal admin page" {
		t.Fatalf("with the address named: got IsError=%v %q", isErr, msg)
	}
}

// The cluster's CIDRs are refused like private ranges, whatever resolves to
// them, unless a rule names them.
func TestHTTPGetRefusesTheClusterCIDRs(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	g := addressGuard{cluster: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	if err := g.check(netip.MustParseAddrPort("203.0.113.7:443")); err == nil || !strings.Contains(err.Error(), "cluster CIDR 203.0.113.0/24") {
		t.Fatalf("a cluster address passed: %v", err)
	}
	rules, err := parseRules([]string{"203.0.113.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	g.named = namedAddresses(rules)
	if err := g.check(netip.MustParseAddrPort("203.0.113.7:443")); err != nil {
		t.Fatalf("a named CIDR was refused: %v", err)
	}
	if err := g.check(netip.MustParseAddrPort("203.0.113.7:8080")); err == nil {
		t.Fatal("a named CIDR allowed a port other than 80/443")
	}
	if _, err := New(Options{HTTPGet: &HTTPGetOptions{ClusterCIDRs: append(cluster, netip.Prefix{})}}); err == nil {
		t.Fatal("an invalid cluster CIDR was accepted")
	}
}
