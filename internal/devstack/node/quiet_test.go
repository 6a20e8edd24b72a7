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
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestConflictsAreQuiet(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(conflictsQuiet{Handler: slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: conflictLevel})}).With("workerId", 0)
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

// verboseError formats a stack trace with %+v, as the pkg/errors errors
// virtual-kubelet wraps do (zap logs it as errorVerbose).
type verboseError struct{ msg string }

func (e verboseError) Error() string { return e.msg }

func (e verboseError) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('+') {
		_, _ = fmt.Fprintf(f, "%s\nstack\ntrace", e.msg)
		return
	}
	_, _ = fmt.Fprint(f, e.msg)
}

// TestConflictsAreDebugInTheNodeLog: logged as virtual-kubelet logs it
// (its slog adapter, WithError, then Error) through the logger the stack
// gives the node (zap in development mode, as local-node.log is written), a
// conflict is one DEBUG line without a stack trace; another error stays an
// ERROR.
func TestConflictsAreDebugInTheNodeLog(t *testing.T) {
	var buf bytes.Buffer
	log := vkslog.FromSlog(slog.New(conflictsQuiet{Handler: logr.ToSlogHandler(
		zap.New(zap.WriteTo(&buf), zap.UseDevMode(true)).WithName("virtual-kubelet"))})).WithField("workerId", 1)
	conflict := `error while updating pod status in kubernetes: Operation cannot be fulfilled on pods "r-1": ` +
		`the object has been modified; please apply your changes to the latest version and try again`
	log.WithError(verboseError{conflict}).Error("Error processing pod status update")
	quiet := buf.String()
	if !strings.Contains(quiet, "\tDEBUG\t") || strings.Contains(quiet, "ERROR") || strings.Contains(quiet, "stack") ||
		strings.Contains(quiet, "errorVerbose") || !strings.Contains(quiet, "the object has been modified") ||
		strings.Count(strings.TrimSpace(quiet), "\n") != 0 {
		t.Errorf("a conflict in the node's log:\n%s", quiet)
	}
	buf.Reset()
	log.WithError(verboseError{"connection refused"}).Error("Error processing pod status update")
	if !strings.Contains(buf.String(), "\tERROR\t") || !strings.Contains(buf.String(), "errorVerbose") {
		t.Errorf("another error in the node's log:\n%s", buf.String())
	}
}
