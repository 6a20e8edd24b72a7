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
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// What http.get may reach is decided twice: the URL against the allow-host
// rules (host and port), and, at connect time, the address the connection
// goes to (whatever a name resolved to, on the first request, a redirect or
// a DNS answer that changed in between).

// defaultPorts are the ports a rule that names none allows.
var defaultPorts = []string{"80", "443"}

// allowRule is one parsed allow-host rule.
type allowRule struct {
	text string // as configured, lower case
	// host is a host name or an address literal; for a wildcard, the
	// suffix with its dot (".example.org"); "" for a CIDR.
	host     string
	wildcard bool
	port     string // "" allows defaultPorts
	// addrs, when valid, are the addresses the rule names: connections to
	// them pass the address guard.
	addrs netip.Prefix
}

// parseRules parses allow-host rules; blank ones are skipped.
func parseRules(texts []string) ([]allowRule, error) {
	var rules []allowRule
	for _, t := range texts {
		r, ok, err := parseRule(t)
		if err != nil {
			return nil, err
		}
		if ok {
			rules = append(rules, r)
		}
	}
	return rules, nil
}

// parseRule parses one rule; ok is false for a blank one.
func parseRule(text string) (r allowRule, ok bool, err error) {
	t := strings.ToLower(strings.TrimSpace(text))
	if t == "" {
		return r, false, nil
	}
	r.text = t
	bad := func(why string) (allowRule, bool, error) {
		return allowRule{}, false, fmt.Errorf("toolserver: allow-host rule %q: %s; want host, host:port, *.domain, an address or a CIDR", t, why)
	}
	if p, perr := netip.ParsePrefix(t); perr == nil {
		r.addrs = p.Masked()
		return r, true, nil
	}
	if strings.Contains(t, "/") {
		return bad("a rule is no URL and no path")
	}
	host, port := t, ""
	if a, aerr := netip.ParseAddr(t); aerr == nil {
		host = a.String()
	} else if h, p, serr := net.SplitHostPort(t); serr == nil {
		host, port = h, p
		if n, nerr := strconv.Atoi(p); nerr != nil || n < 1 || n > 65535 {
			return bad("port " + strconv.Quote(p) + " is not a number from 1 to 65535")
		}
	}
	if host == "" {
		return bad("no host")
	}
	if a, aerr := netip.ParseAddr(host); aerr == nil {
		a = a.Unmap()
		r.host, r.port, r.addrs = a.String(), port, netip.PrefixFrom(a, a.BitLen())
		return r, true, nil
	}
	if strings.Contains(host, "*") {
		if !strings.HasPrefix(host, "*.") || strings.Count(host, "*") > 1 || len(host) < 3 {
			return bad("a wildcard is *.domain")
		}
		r.wildcard, host = true, host[1:]
	}
	if strings.ContainsAny(host, "[]@?#:") {
		return bad("not a host name")
	}
	r.host, r.port = host, port
	return r, true, nil
}

// matchRules returns the text of the first rule that lets u be fetched, or "".
func matchRules(rules []allowRule, u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return ""
	}
	var addr netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addr = a.Unmap()
		host = addr.String()
	}
	port := effectivePort(u)
	for _, r := range rules {
		if r.port == "" && !slices.Contains(defaultPorts, port) || r.port != "" && r.port != port {
			continue
		}
		switch {
		case r.host == "" && addr.IsValid() && r.addrs.Contains(addr):
			return r.text
		case r.host == "":
		case r.wildcard && strings.HasSuffix(host, r.host):
			return r.text
		case !r.wildcard && r.host == host:
			return r.text
		}
	}
	return ""
}

// effectivePort is u's port, or its scheme's.
func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// hostPort is u's host with its effective port, for messages.
func hostPort(u *url.URL) string { return net.JoinHostPort(u.Hostname(), effectivePort(u)) }

// namedAddresses are the addresses the rules name, each with its port
// ("" for 80 and 443).
func namedAddresses(rules []allowRule) []namedAddress {
	var ns []namedAddress
	for _, r := range rules {
		if r.addrs.IsValid() {
			ns = append(ns, namedAddress{prefix: r.addrs, port: r.port})
		}
	}
	return ns
}

// namedAddress is an address or CIDR a rule names, with its port.
type namedAddress struct {
	prefix netip.Prefix
	port   string
}

// allows reports whether the rule lets a connection go to ap.
func (n namedAddress) allows(ap netip.AddrPort) bool {
	port := strconv.Itoa(int(ap.Port()))
	return n.prefix.Contains(ap.Addr()) && (n.port == port || n.port == "" && slices.Contains(defaultPorts, port))
}

// errAddressRefused is a connection the address guard refused.
var errAddressRefused = errors.New("address refused")

// refusedAddress says which address was refused and why.
type refusedAddress struct {
	addr  netip.AddrPort
	class string
}

func (e *refusedAddress) Error() string {
	return fmt.Sprintf("refusing to connect to %s (%s): http.get reaches loopback, link-local, private, "+
		"special-purpose and cluster addresses only when an allow-host rule names the address (and port) or a CIDR holding it",
		e.addr, e.class)
}

func (e *refusedAddress) Unwrap() error { return errAddressRefused }

// specialRanges are the special-purpose ranges netip's predicates do not
// name, and what they are.
var specialRanges = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
}

// metadataAddrs are the cloud instance metadata services' addresses.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, …
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// AddressClass names why http.get refuses to connect to a, or returns ""
// for a public address: the metadata services, unspecified, loopback,
// link-local, multicast, private (RFC 1918, ULA), the special-purpose ranges
// and the cluster's CIDRs. An IPv4-mapped IPv6 address is its IPv4 one.
func AddressClass(a netip.Addr, cluster []netip.Prefix) string {
	a = a.Unmap()
	if slices.Contains(metadataAddrs, a) {
		return "metadata service"
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	}
	for _, s := range specialRanges {
		if s.prefix.Contains(a) {
			return s.class
		}
	}
	for _, p := range cluster {
		if p.Contains(a) {
			return "cluster CIDR " + p.String()
		}
	}
	return ""
}

// addressGuard decides, at connect time, whether http.get may connect to an
// address.
type addressGuard struct {
	named   []namedAddress
	cluster []netip.Prefix
}

// check returns nil when ap may be connected to: a public address, or one
// a rule names (on the rule's port).
func (g addressGuard) check(ap netip.AddrPort) error {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	for _, n := range g.named {
		if n.allows(ap) {
			return nil
		}
	}
	if class := AddressClass(ap.Addr(), g.cluster); class != "" {
		return &refusedAddress{addr: ap, class: class}
	}
	return nil
}

// control is a net.Dialer's Control: it runs after the address is chosen
// and before the connection is made.
func (g addressGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dialing %q: %w", address, err)
	}
	return g.check(ap)
}

// guardedDialer resolves with its resolver and dials each address in turn
// through a dialer whose Control is the address guard.
type guardedDialer struct {
	resolver Resolver
	dialer   net.Dialer
	guard    addressGuard
}

func (d *guardedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portText, err)
	}
	var addrs []netip.Addr
	if a, aerr := netip.ParseAddr(host); aerr == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = d.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	var first error
	for _, a := range addrs {
		c, err := d.dialer.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}
