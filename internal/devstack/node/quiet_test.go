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
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestConflictsAreQuiet(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(conflictsQuiet{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: conflictLevel})}).With("workerId", 0)
	conflict := `Operation cannot be fulfilled on pods "r-1": the object has been modified; please apply your changes to the latest version and try again`
	log.Error("Error processing pod status update", "error", conflict, "errorVerbose", "stack\ntrace")
	log.Error("Error processing pod status update", "error", "connection refused", "errorVerbose", "stack\ntrace")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines: %q", len(lines), buf.String())
	}
	var quiet, loud map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &quiet); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &loud); err != nil {
		t.Fatal(err)
	}
	if quiet["level"] != conflictLevel.String() || quiet["errorVerbose"] != nil || quiet["error"] != conflict || quiet["workerId"] != float64(0) ||
		!strings.Contains(quiet["msg"].(string), "optimistic-lock conflict") {
		t.Errorf("a conflict: %v", quiet)
	}
	if loud["level"] != "ERROR" || loud["errorVerbose"] == nil {
		t.Errorf("another error is left as it is: %v", loud)
	}
}

// TestConflictsAreDebugInTheNodeLog: through the logger the stack gives the
// node (zap in development mode, as local-node.log is written), a conflict
// is a DEBUG line without a stack trace; another error stays an ERROR.
func TestConflictsAreDebugInTheNodeLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(conflictsQuiet{logr.ToSlogHandler(zap.New(zap.WriteTo(&buf), zap.UseDevMode(true)).WithName("virtual-kubelet"))})
	conflict := `Operation cannot be fulfilled on pods "r-1": the object has been modified; please apply your changes to the latest version and try again`
	log.Error("Error processing pod status update", "error", conflict, "errorVerbose", "stack\ntrace")
	quiet := buf.String()
	if !strings.Contains(quiet, "\tDEBUG\t") || strings.Contains(quiet, "ERROR") || strings.Contains(quiet, "stack\ntrace") ||
		strings.Contains(quiet, "errorVerbose") || strings.Count(strings.TrimSpace(quiet), "\n") != 0 {
		t.Errorf("a conflict in the node's log:\n%s", quiet)
	}
	buf.Reset()
	log.Error("Error processing pod status update", "error", "connection refused")
	if !strings.Contains(buf.String(), "\tERROR\t") {
		t.Errorf("another error in the node's log:\n%s", buf.String())
	}
}
