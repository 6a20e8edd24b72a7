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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// The gateway's identity, as config/default deploys it.
const (
	GatewayServiceAccount = "agentrun-gateway"
	GatewayUser           = "system:serviceaccount:" + OperatorNamespace + ":" + GatewayServiceAccount
)

// startUpstream starts the scripted upstream (a fake OpenAI-compatible
// provider) on loopback, in this process.
func (s *Stack) startUpstream() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Upstream = &upstream.Server{Latency: s.opts.UpstreamLatency}
	srv := &http.Server{Handler: s.Upstream, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.closers = append(s.closers, srv)
	s.UpstreamURL = "http://" + ln.Addr().String() + "/v1"
	return nil
}

// startGateway writes the gateway's kubeconfig (its own identity) and a
// serving certificate from a fresh CA, and starts the gateway binary on
// loopback.
func (s *Stack) startGateway(ctx context.Context) error {
	out := s.opts.out()
	user, kubeconfig, err := s.serviceAccountUser(GatewayUser, "gateway.kubeconfig")
	if err != nil {
		return err
	}
	if s.opts.GatewayAPIFaults {
		// The gateway reaches the API server only through the proxy.
		if kubeconfig, err = s.startAPIFaults(user, "gateway-api-faults.kubeconfig"); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "    the gateway reaches the API server through the fault proxy %s\n", s.APIFaults.URL)
	}
	tlsDir := filepath.Join(s.opts.Dir, "gateway-tls")
	if err := writeServingCert(tlsDir); err != nil {
		return err
	}
	s.GatewayCAFile = filepath.Join(tlsDir, "ca.crt")
	ports, err := freeLoopbackPorts(3)
	if err != nil {
		return err
	}
	port, metricsPort, healthPort := ports[0], ports[1], ports[2]
	s.GatewayURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	s.GatewayMetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	s.AuditLog = filepath.Join(s.LogDir, "audit.jsonl")
	args := make([]string, 0, 8+len(s.opts.GatewayArgs))
	args = append(args,
		"--kubeconfig="+kubeconfig,
		fmt.Sprintf("--listen=127.0.0.1:%d", port),
		"--tls-cert-dir="+tlsDir,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		// Plain HTTP on loopback, as the operator's here (GatewayMetricsURL).
		"--metrics-secure=false",
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", healthPort),
		"--audit-log="+s.AuditLog)
	if s.StreamNATSURL != "" {
		args = append(args, "--stream-url="+s.StreamNATSURL)
	}
	if s.opts.GatewayTokenCacheTTL > 0 {
		args = append(args, "--token-cache-ttl="+s.opts.GatewayTokenCacheTTL.String())
	}
	args = append(args, s.opts.GatewayArgs...)
	s.Gateway = &Operator{
		Binary:     s.opts.GatewayBinary,
		Args:       args,
		Env:        append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}, otelEnv(os.Environ())...),
		LogPath:    filepath.Join(s.LogDir, "gateway.log"),
		HealthAddr: fmt.Sprintf("127.0.0.1:%d", healthPort),
	}
	_, _ = fmt.Fprintf(out, "==> starting agentrun-gateway (%s) as %s on %s\n", rel(s.opts.Root, s.opts.GatewayBinary), GatewayUser, s.GatewayURL)
	return s.StartGateway(ctx)
}

// StartGateway starts the gateway process and waits until it is ready.
func (s *Stack) StartGateway(ctx context.Context) error {
	return s.startProcess(ctx, "gateway", s.Gateway, 60*time.Second)
}

// startProcess starts one of the stack's processes and waits until its
// health endpoint says it is ready, saying so on the stack's output.
func (s *Stack) startProcess(ctx context.Context, name string, p *Operator, timeout time.Duration) error {
	start := time.Now()
	if err := p.Start(); err != nil {
		return err
	}
	if err := p.WaitReady(ctx, timeout); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	_, _ = fmt.Fprintf(s.opts.out(), "    %s pid %d ready in %s (log: %s)\n", name, p.Pid(),
		time.Since(start).Round(100*time.Millisecond), rel(s.opts.Root, p.LogPath))
	return nil
}

// writeServingCert writes ca.crt, tls.crt and tls.key into dir: a fresh CA
// and a certificate for 127.0.0.1 and localhost signed by it.
func writeServingCert(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentrun-dev gateway CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agentrun-gateway"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "agentrun-gateway.agentrun-system.svc"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
