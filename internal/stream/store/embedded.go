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

package store

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is a NATS server with JetStream running in this process, storing
// in a real directory.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server in process with JetStream storing in
// cfg.Dir. It accepts no network clients unless cfg.Listen is set.
func StartEmbedded(cfg Config) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, errors.New("stream store: an embedded server needs a store directory")
	}
	opts := &server.Options{
		ServerName:   "agentrun-stream",
		JetStream:    true,
		StoreDir:     cfg.Dir,
		SyncAlways:   cfg.SyncAlways,
		SyncInterval: cfg.SyncInterval,
		NoSigs:       true,
		NoLog:        true,
		DontListen:   cfg.Listen == "",
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("stream store: listen %q: %w", cfg.Listen, err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("stream store: listen %q: %w", cfg.Listen, err)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
		if cfg.ListenTLS != nil {
			opts.TLSConfig = cfg.ListenTLS
			opts.TLS = true
			opts.TLSVerify = cfg.ListenTLS.ClientAuth == tls.RequireAndVerifyClientCert
			opts.TLSTimeout = 5
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("stream store: embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("stream store: embedded NATS did not become ready in 10s")
	}
	return &Embedded{srv: srv}, nil
}

// Server is the running server, for an in-process client connection.
func (e *Embedded) Server() *server.Server { return e.srv }

// ClientURL is the server's client URL (meaningful with Listen set).
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits for it to stop.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
