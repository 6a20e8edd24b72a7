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

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The gateway's metrics are served as the operator's: over HTTPS with the
// certificate of --metrics-cert-path (the one a ServiceMonitor verifies),
// HTTP/1.1 only, and refused to a caller without a token; plain HTTP only
// when --metrics-secure=false (the local stack).
func TestMetricsServedOverVerifiedTLS(t *testing.T) {
	dir, pool := writeCert(t, "agentrun-gateway-metrics.agentrun-system.svc")
	addr := freeAddr(t)
	startMetrics(t, metricsOptions(addr, true, dir, "tls.crt", "tls.key"))

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "agentrun-gateway-metrics.agentrun-system.svc", NextProtos: []string{"h2", "http/1.1"},
	}}}
	g := NewWithT(t)
	var resp *http.Response
	g.Eventually(func() (err error) {
		resp, err = client.Get("https://" + addr + "/metrics")
		return err
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "an HTTPS scrape that verifies the certificate of --metrics-cert-path")
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized), "a scrape without a token")
	g.Expect(resp.TLS).NotTo(BeNil())
	g.Expect(resp.TLS.NegotiatedProtocol).NotTo(Equal("h2"), "HTTP/1.1 only (no HTTP/2, as the operator's)")

	plain := freeAddr(t)
	startMetrics(t, metricsOptions(plain, false, "", "tls.crt", "tls.key"))
	g.Eventually(func() (err error) {
		resp, err = http.Get("http://" + plain + "/metrics")
		return err
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "--metrics-secure=false serves plain HTTP")
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "--metrics-secure=false")
}

func startMetrics(t *testing.T, opts metricsserver.Options) {
	t.Helper()
	// The filter's clients are built but never called: a request without
	// a token is refused before any TokenReview.
	srv, err := metricsserver.NewServer(opts, &rest.Config{Host: "https://127.0.0.1:1"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// writeCert writes a self-signed serving certificate for dnsName, as
// cert-manager's selfsigned Issuer does, and returns its directory and a
// pool trusting it.
func writeCert(t *testing.T, dnsName string) (string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, block := range map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return dir, pool
}
