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

package kubectlplugin

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// table writes aligned columns, the way kubectl prints them (three spaces
// between columns). Cells must not hold colors: escapes would count as width.
type table struct {
	w      io.Writer
	buf    bytes.Buffer
	tw     *tabwriter.Writer
	indent string
}

func newTable(w io.Writer, indent string, header ...string) *table {
	t := &table{w: w, indent: indent}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 8, 3, ' ', 0)
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	_, _ = fmt.Fprintln(t.tw, t.indent+strings.Join(cells, "\t"))
}

// flush writes the table, without the padding of empty last cells.
func (t *table) flush() {
	_ = t.tw.Flush()
	for line := range strings.Lines(t.buf.String()) {
		_, _ = io.WriteString(t.w, strings.TrimRight(line, " \n")+"\n")
	}
	t.buf.Reset()
}

// style colors text when enabled (a terminal).
type style struct{ on bool }

const (
	ansiBold   = "\x1b[1m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
	ansiGreen  = "\x1b[32m"
	ansiReset  = "\x1b[0m"
)

func (s style) wrap(code, text string) string {
	if !s.on || text == "" {
		return text
	}
	return code + text + ansiReset
}

func (s style) heading(text string) string { return s.wrap(ansiBold, text) }
func (s style) bad(text string) string     { return s.wrap(ansiRed, text) }
func (s style) warn(text string) string    { return s.wrap(ansiYellow, text) }
func (s style) good(text string) string    { return s.wrap(ansiGreen, text) }

// phase colors a phase or reason by what it means for the user.
func (s style) outcome(phase v1alpha1.Phase, reason v1alpha1.Reason, text string) string {
	switch {
	case phase == v1alpha1.PhaseTerminated && reason == v1alpha1.ReasonCompleted:
		return s.good(text)
	case phase == v1alpha1.PhaseTerminated:
		return s.bad(text)
	case phase == v1alpha1.PhaseFinalizing || phase == v1alpha1.PhaseRecovering:
		return s.warn(text)
	}
	return text
}

// age is kubectl's AGE: a short human duration.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// ago says when t was relative to now: "5m ago", "in 14m".
func ago(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := now.Sub(t.Time)
	if d < 0 {
		return "in " + duration.HumanDuration(-d)
	}
	return duration.HumanDuration(d) + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// count is "1 model request", "3 model requests".
func count(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return itoa(n) + " " + unit + "s"
}

// usage is "7 model requests, 2 tool calls, 5400 tokens, a cost of 0.42"
// (tokens and cost only when set, tool calls always).
func usage(u v1alpha1.Usage) string {
	parts := []string{count(u.ModelRequests, "model request"), count(u.ToolCalls, "tool call")}
	if u.Tokens > 0 {
		parts = append(parts, count(u.Tokens, "token"))
	}
	if u.Cost > 0 {
		parts = append(parts, "a cost of "+u.Cost.String())
	}
	return strings.Join(parts, ", ")
}

// oneLine escapes the line breaks and tabs of s, so an event stays one line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(s)
}

// truncate cuts s to n runes, saying how much was cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + fmt.Sprintf("… (+%d chars)", len(r)-n)
}
