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
	"context"
	"sync"

	"github.com/agentrun-dev/agentrun/internal/stream"
)

// Lazy is a Publisher that opens its Store on first use and again after a
// failed open: a process whose stream server is not up yet (or down) starts
// anyway, and a Producer in front of it buffers and retries until the store
// can be reached.
type Lazy struct {
	cfg Config

	mu sync.Mutex
	s  *Store
}

var _ Publisher = (*Lazy)(nil)

// NewLazy returns a Lazy opening cfg when first published through.
func NewLazy(cfg Config) *Lazy { return &Lazy{cfg: cfg} }

func (l *Lazy) open(ctx context.Context) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.withDefaults().PublishTimeout)
	defer cancel()
	s, err := Open(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	l.s = s
	return s, nil
}

// Publish opens the store if it is not open yet, then publishes.
func (l *Lazy) Publish(ctx context.Context, run stream.RunKey, ev stream.Event) (uint64, error) {
	s, err := l.open(ctx)
	if err != nil {
		if m := l.cfg.Metrics; m != nil {
			m.PublishErrors.Inc()
		}
		return 0, err
	}
	return s.Publish(ctx, run, ev)
}

// Close closes the store if it was opened.
func (l *Lazy) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		l.s.Close()
		l.s = nil
	}
}
