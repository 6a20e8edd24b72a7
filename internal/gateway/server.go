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

package gateway

import (
	"crypto/tls"
	"net/http"
	"time"
)

// Defaults of ServerLimits.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers (and the
	// TLS handshake before the first request).
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading one whole request, body included.
	DefaultReadTimeout = time.Minute
	// DefaultIdleTimeout is how long a kept-alive connection may wait for
	// its next request.
	DefaultIdleTimeout = time.Minute
)

// ServerLimits bound what one connection can hold of the gateway's server.
// Any pod may open connections to the gateway of its node, so none may sit
// there for free: a connection that sends no complete headers, trickles a
// body, or idles between requests is closed. Answers are not bounded (no
// WriteTimeout): watch streams, model streams and approval waits last as
// long as they need. (ReadTimeout does not cut them: net/http clears the
// read deadline once a request's body has been read, to watch for the
// client going away.)
type ServerLimits struct {
	// ReadHeaderTimeout (default DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body
	// (default DefaultReadTimeout).
	ReadTimeout time.Duration
	// IdleTimeout (default DefaultIdleTimeout).
	IdleTimeout time.Duration
}

// NewServer returns the HTTP server for the gateway's handler h, with the
// limits (zero fields take the defaults) and tlsCfg (nil: plain HTTP).
func NewServer(h http.Handler, tlsCfg *tls.Config, l ServerLimits) *http.Server {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
}
