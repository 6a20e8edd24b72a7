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

package gatewaytest

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// Standalone starts an Env outside a Go test (the protocol conformance
// server of test/conformance, which other languages' tests start). With tls
// the gateway serves HTTPS with a self-signed certificate (Env.Server's
// Certificate), as the gateway of an attempt pod does. stop ends it.
func Standalone(o Options, tls bool) (env *Env, stop func(), err error) {
	tb := &standaloneTB{}
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(standaloneFatal); ok {
				tb.cleanup()
				env, stop, err = nil, nil, fmt.Errorf("gatewaytest: %s", string(f))
				return
			}
			panic(r)
		}
	}()
	e := Start(tb, o)
	if tls {
		e.Server.Close()
		srv := httptest.NewUnstartedServer(e.Gateway.Handler())
		srv.StartTLS()
		e.Server = srv
	}
	return e, tb.cleanup, nil
}

// standaloneFatal is the panic of a Fatal outside a test.
type standaloneFatal string

// standaloneTB is the part of testing.TB the Env uses; Fatal panics (and
// Standalone turns the panic into its error). Methods the Env does not use
// are not implemented.
type standaloneTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (t *standaloneTB) Helper()      {}
func (t *standaloneTB) Name() string { return "conformance" }
func (t *standaloneTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *standaloneTB) Fatal(args ...any) { panic(standaloneFatal(fmt.Sprint(args...))) }
func (t *standaloneTB) Fatalf(format string, args ...any) {
	panic(standaloneFatal(fmt.Sprintf(format, args...)))
}
func (t *standaloneTB) Error(args ...any)                 { panic(standaloneFatal(fmt.Sprint(args...))) }
func (t *standaloneTB) Errorf(format string, args ...any) { t.Fatalf(format, args...) }
func (t *standaloneTB) Log(...any)                        {}
func (t *standaloneTB) Logf(string, ...any)               {}

func (t *standaloneTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}
