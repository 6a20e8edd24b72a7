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

package node

import (
	"context"
	"log/slog"
	"strings"
)

// conflictsQuiet is a slog handler for virtual-kubelet's logs: an
// optimistic-lock conflict (another writer updated the pod first; the
// update is retried) is routine, so it is logged at conflictLevel without
// the stack trace virtual-kubelet attaches (errorVerbose), not as an ERROR.
type conflictsQuiet struct{ slog.Handler }

// conflictLevel is logr's V(1) (logr.ToSlogHandler maps slog level -n to
// V(n)): the node's debug lines, shown as DEBUG in the stack's
// local-node.log, like "bound pod".
const conflictLevel = slog.Level(-1)

// conflictMessage is the API server's text for an optimistic-lock conflict.
const conflictMessage = "the object has been modified"

func (h conflictsQuiet) Handle(ctx context.Context, r slog.Record) error {
	conflict := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && strings.Contains(a.Value.String(), conflictMessage) {
			conflict = true
			return false
		}
		return true
	})
	if !conflict || r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, conflictLevel, r.Message+" (an optimistic-lock conflict; retried)", r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "errorVerbose" {
			out.AddAttrs(a)
		}
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h conflictsQuiet) WithAttrs(attrs []slog.Attr) slog.Handler {
	return conflictsQuiet{h.Handler.WithAttrs(attrs)}
}

func (h conflictsQuiet) WithGroup(name string) slog.Handler {
	return conflictsQuiet{h.Handler.WithGroup(name)}
}
