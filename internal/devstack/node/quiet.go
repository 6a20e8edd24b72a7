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
// update is retried) is routine, so it is logged at conflictLevel with the
// error as plain text (no stack trace: zap adds errorVerbose for an error
// that formats one), not as an ERROR. virtual-kubelet attaches the error
// with WithError, i.e. slog's With, before it logs, so the handler looks at
// the attributes it is given with WithAttrs as well as at the record's.
type conflictsQuiet struct {
	slog.Handler
	// conflict says an attribute given with WithAttrs is a conflict.
	conflict bool
}

// conflictLevel is logr's V(1) (logr.ToSlogHandler maps slog level -n to
// V(n)): the node's debug lines, shown as DEBUG in the stack's
// local-node.log, like "bound pod".
const conflictLevel = slog.Level(-1)

// conflictMessage is the API server's text for an optimistic-lock conflict.
const conflictMessage = "the object has been modified"

// isConflict says whether a is an error attribute that is a conflict.
func isConflict(a slog.Attr) bool {
	return a.Key == "error" && strings.Contains(a.Value.String(), conflictMessage)
}

// plain is a as text: an error value becomes its message.
func plain(a slog.Attr) slog.Attr {
	if a.Key == "error" {
		return slog.String(a.Key, a.Value.String())
	}
	return a
}

func (h conflictsQuiet) Handle(ctx context.Context, r slog.Record) error {
	conflict := h.conflict
	r.Attrs(func(a slog.Attr) bool {
		conflict = conflict || isConflict(a)
		return !conflict
	})
	if !conflict || r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, conflictLevel, r.Message+" (an optimistic-lock conflict; retried)", r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "errorVerbose" {
			out.AddAttrs(plain(a))
		}
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h conflictsQuiet) WithAttrs(attrs []slog.Attr) slog.Handler {
	conflict := h.conflict
	out := make([]slog.Attr, 0, len(attrs))
	for _, a := range attrs {
		if isConflict(a) {
			conflict = true
			a = plain(a)
		}
		out = append(out, a)
	}
	return conflictsQuiet{Handler: h.Handler.WithAttrs(out), conflict: conflict}
}

func (h conflictsQuiet) WithGroup(name string) slog.Handler {
	return conflictsQuiet{Handler: h.Handler.WithGroup(name), conflict: h.conflict}
}
