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

package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/agentrun-dev/agentrun/pkg/agent"
)

// Tool names of the research agent.
const (
	ToolNotesWrite    = "notes.write"
	ToolHTTPGet       = "http.get"
	ToolReportPublish = "report.publish"
)

// Bounds of the notebook and of fetched pages.
const (
	maxNotes      = 500
	maxNotesBytes = 1 << 20
	maxPageBytes  = 64 << 10
)

type note struct {
	Section string `json:"section,omitempty"`
	Text    string `json:"text"`
}

// notebook is the agent's working notes: in memory, and appended to a local
// file when one is configured. Bounded.
type notebook struct {
	mu    sync.Mutex
	notes []note
	bytes int
	path  string
}

// add appends a note; added is false for a note already taken.
func (n *notebook) add(section, text string) (added bool, count int, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range n.notes {
		if strings.EqualFold(x.Section, section) && x.Text == text {
			return false, len(n.notes), nil
		}
	}
	if len(n.notes) >= maxNotes || n.bytes+len(text) > maxNotesBytes {
		return false, len(n.notes), agent.Failure("NotesFull", false,
			fmt.Errorf("the notebook is full (%d notes, %d bytes)", len(n.notes), n.bytes))
	}
	nt := note{Section: section, Text: text}
	if n.path != "" {
		line, _ := json.Marshal(nt)
		f, err := os.OpenFile(n.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return false, len(n.notes), agent.Failure("NotesFileError", true, err)
		}
		_, werr := f.Write(append(line, '\n'))
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return false, len(n.notes), agent.Failure("NotesFileError", true, err)
		}
	}
	n.notes = append(n.notes, nt)
	n.bytes += len(text)
	return true, len(n.notes), nil
}

// forSection returns the text of the notes taken for section.
func (n *notebook) forSection(section string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, x := range n.notes {
		if strings.EqualFold(x.Section, section) {
			out = append(out, x.Text)
		}
	}
	return out
}

func (n *notebook) summary(limit int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, x := range n.notes {
		line := "- " + x.Text
		if x.Section != "" {
			line = fmt.Sprintf("- [%s] %s", x.Section, x.Text)
		}
		if b.Len()+len(line) > limit {
			b.WriteString("- …\n")
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// Tool argument names.
const (
	argSection = "section"
	argContent = "content"
	argText    = "text"
	argURL     = "url"
	jsonObject = "object"
	schemaType = "type"
)

// schema is the JSON schema of an object of string properties.
func schema(required []string, props ...[2]string) map[string]any {
	properties := map[string]any{}
	for _, p := range props {
		properties[p[0]] = map[string]any{schemaType: "string", "description": p[1]}
	}
	return map[string]any{schemaType: jsonObject, "properties": properties, "required": required}
}

func (r *runner) tools() []agent.Tool {
	return []agent.Tool{
		{
			Name:        ToolNotesWrite,
			Description: "Record a finding in the working notes, tagged with the report section it belongs to.",
			Parameters: schema([]string{argText},
				[2]string{argSection, "report section the note is for"}, [2]string{argText, "the finding"}),
			Run: r.notesWrite,
			Done: func(_ context.Context, call *agent.Call, _ string) {
				// The gateway noted it in the run's notes; keep the local copy
				// the report is written from.
				text := strings.TrimSpace(call.StringArg(argText))
				if added, _, _ := r.notes.add(call.StringArg(argSection), text); added {
					r.mu.Lock()
					r.newNotes++
					r.mu.Unlock()
				}
			},
		},
		{
			Name:        ToolHTTPGet,
			Description: "Fetch a web page from an allow-listed host; returns the status and up to 64 KiB of the body.",
			Parameters:  schema([]string{argURL}, [2]string{argURL, "an http(s) URL"}),
			Run:         r.httpGet,
			Done: func(_ context.Context, call *agent.Call, _ string) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if u := call.StringArg(argURL); !r.fetched[u] && len(r.fetched) < maxNotes {
					r.fetched[u] = true
					r.newPages++
				}
			},
		},
		{
			Name:        ToolReportPublish,
			Description: "Publish one planned section of the report (durable; needs the user's approval).",
			Parameters: schema([]string{argSection, argContent},
				[2]string{argSection, "a planned section title"}, [2]string{argContent, "the section's text (Markdown)"}),
			Output: true,
			Run:    r.reportPublish,
			Done: func(_ context.Context, call *agent.Call, _ string) {
				section := strings.TrimSpace(call.StringArg(argSection))
				r.mu.Lock()
				defer r.mu.Unlock()
				for _, s := range r.plan {
					if strings.EqualFold(s, section) {
						r.published[s] = true
					}
				}
			},
		},
	}
}

func (r *runner) notesWrite(ctx context.Context, call *agent.Call) (string, error) {
	if err := r.beforeTool(ctx); err != nil {
		return "", err
	}
	text := strings.TrimSpace(call.StringArg(argText))
	if text == "" {
		return "", agent.Failure("InvalidArguments", false, errors.New("notes.write needs a text"))
	}
	added, n, err := r.notes.add(call.StringArg(argSection), text)
	if err != nil {
		return "", err
	}
	if !added {
		return fmt.Sprintf("already noted (%d notes)", n), nil
	}
	r.mu.Lock()
	r.newNotes++
	r.mu.Unlock()
	return fmt.Sprintf("noted (%d notes)", n), nil
}

// allowed reports whether host (with or without port) matches the allowlist:
// exact hosts, "host:port", or "*.example.org" for subdomains. An empty
// allowlist allows nothing.
func allowed(allowlist []string, u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	hostPort := strings.ToLower(u.Host)
	for _, a := range allowlist {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "":
		case a == host || a == hostPort:
			return true
		case strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:]):
			return true
		}
	}
	return false
}

func (r *runner) httpGet(ctx context.Context, call *agent.Call) (string, error) {
	if err := r.beforeTool(ctx); err != nil {
		return "", err
	}
	raw := call.StringArg(argURL)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", agent.Failure("InvalidArguments", false, fmt.Errorf("http.get needs an http(s) URL, not %q", raw))
	}
	if !allowed(r.cfg.HTTPAllowlist, u) {
		return "", agent.Failure("HostNotAllowed", false,
			fmt.Errorf("host %s is not in the allowlist %v", u.Host, r.cfg.HTTPAllowlist))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", agent.Failure("InvalidArguments", false, err)
	}
	req.Header.Set("User-Agent", "agentrun-research-agent")
	resp, err := r.cfg.HTTPClient.Do(req)
	if err != nil {
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			return "", agent.Failure("Timeout", true, err)
		}
		return "", agent.Failure("Unreachable", true, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes))
	if err != nil {
		return "", agent.Failure("ReadError", true, err)
	}
	if resp.StatusCode >= 400 {
		return "", agent.Failure(fmt.Sprintf("HTTP%d", resp.StatusCode), resp.StatusCode >= 500 || resp.StatusCode == 429,
			fmt.Errorf("GET %s: %s", u, resp.Status))
	}
	r.mu.Lock()
	if !r.fetched[u.String()] && len(r.fetched) < maxNotes {
		r.fetched[u.String()] = true
		r.newPages++
	}
	r.mu.Unlock()
	return fmt.Sprintf("HTTP %d\n%s", resp.StatusCode, body), nil
}

func (r *runner) reportPublish(ctx context.Context, call *agent.Call) (string, error) {
	if err := r.beforeTool(ctx); err != nil {
		return "", err
	}
	section, content := strings.TrimSpace(call.StringArg(argSection)), call.StringArg(argContent)
	if section == "" || strings.TrimSpace(content) == "" {
		return "", agent.Failure("InvalidArguments", false, errors.New("report.publish needs a section and a content"))
	}
	r.mu.Lock()
	plan := append([]string(nil), r.plan...)
	r.mu.Unlock()
	i := -1
	for j, s := range plan {
		if strings.EqualFold(s, section) {
			i = j
			break
		}
	}
	if i < 0 {
		return "", agent.Failure("UnplannedSection", false, fmt.Errorf("section %q is not in the plan %q", section, plan))
	}
	rep, err := r.ag.Publish(ctx, call, call.StringArg(argSection), content)
	if err != nil {
		return "", agent.Failure("PublishFailed", true, err)
	}
	r.mu.Lock()
	r.published[plan[i]] = true
	r.mu.Unlock()
	return fmt.Sprintf("published section %q (%d of %d)", plan[i], rep.Committed, len(rep.Sections)), nil
}
