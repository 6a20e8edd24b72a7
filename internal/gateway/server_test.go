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

package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/internal/gateway"
)

// serve runs gateway.NewServer(h) with limits on a loopback listener.
func serve(t *testing.T, h http.Handler, l gateway.ServerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gateway.NewServer(h, nil, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes conn (EOF or reset) within
// d, whatever it sends before.
func closedWithin(conn net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// Security review 25, item 5: a kept-alive connection that sends nothing
// more is closed after IdleTimeout (1,000 idle connections were still open
// after 75 s), and one that sends no complete headers after
// ReadHeaderTimeout.
func TestAnIdleConnectionIsClosed(t *testing.T) {
	g := NewWithT(t)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		gateway.ServerLimits{IdleTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond})

	conn, err := net.Dial("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: gateway\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusNoContent))
	g.Expect(resp.Close).To(BeFalse(), "kept alive")
	g.Expect(closedWithin(conn, br, 3*time.Second)).To(BeTrue(), "the idle connection is closed by the server")

	half, err := net.Dial("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = half.Close() }()
	_, err = io.WriteString(half, "GET / HTTP/1.1\r\nHost: gat")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(closedWithin(half, bufio.NewReader(half), 3*time.Second)).To(BeTrue(), "headers never completed: closed")
}

// Security review 25, item 5: a body trickled slower than ReadTimeout is
// cut off (the handler's read fails, the connection closes), while a
// request whose body is read in time may take as long as it needs to
// answer — a stream, an approval wait — with its context alive.
func TestASlowBodyIsCutOffButALongAnswerIsNot(t *testing.T) {
	g := NewWithT(t)
	readErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	})
	mux.HandleFunc("POST /long", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "cut", http.StatusServiceUnavailable)
		case <-time.After(600 * time.Millisecond): // three read timeouts
			_, _ = w.Write(body)
		}
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		for range 6 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = io.WriteString(w, "data: x\n\n")
			_ = http.NewResponseController(w).Flush()
		}
	})
	addr := serve(t, mux, gateway.ServerLimits{ReadTimeout: 200 * time.Millisecond})

	conn, err := net.Dial("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	_, err = io.WriteString(conn, "POST /slow HTTP/1.1\r\nHost: gateway\r\nContent-Length: 100\r\n\r\n0123456789")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(readErr, 3*time.Second).Should(Receive(HaveOccurred()), "the trickled body's read times out")
	g.Expect(closedWithin(conn, bufio.NewReader(conn), 3*time.Second)).To(BeTrue())

	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+addr+"/long", "text/plain", strings.NewReader("hello"))
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "the answer after the body was read is not cut: %s", body)
	g.Expect(string(body)).To(Equal("hello"))

	resp, err = c.Get("http://" + addr + "/stream")
	g.Expect(err).NotTo(HaveOccurred())
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(string(body)).To(Equal(strings.Repeat("data: x\n\n", 6)), "a stream outlives the read timeout")
}
