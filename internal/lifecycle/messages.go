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

package lifecycle

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// maxMessage is the API's bound on status.message.
const maxMessage = 2048

// finalizingFrom joins a finalization's cause to where it finalizes from;
// finalizedFrom is the same clause once finalization is over.
const (
	finalizingFrom = "; finalizing from "
	finalizedFrom  = "; finalized from "
)

// truncate shortens s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// dur prints a duration for people: whole seconds from one second up.
func dur(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

// detail appends a pod's or fault's own message, if any.
func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + truncate(s, 256)
}

// count says "1 thing" or "n things".
func count(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// describeReserve says what a finalization may still spend.
func (p *pass) describeReserve(extra v1alpha1.Usage) string {
	var parts []string
	if extra.ModelRequests > 0 {
		parts = append(parts, count(extra.ModelRequests, "model request"))
	}
	if extra.ToolCalls > 0 {
		parts = append(parts, count(extra.ToolCalls, "tool call"))
	}
	if p.lim.tokens && extra.Tokens > 0 {
		parts = append(parts, count(extra.Tokens, "token"))
	}
	if len(parts) == 0 {
		return "an empty reserve"
	}
	return "the reserve of " + strings.Join(parts, " and ")
}

// finalizingStory is the message the run got when it entered Finalizing.
func (p *pass) finalizingStory() string {
	if c := p.condition(v1alpha1.ConditionFinalizing); c != nil && c.Message != "" {
		return c.Message
	}
	return p.st.Message
}

// finalizingCause is why the run is finalizing, without where from.
func (p *pass) finalizingCause() string {
	s := p.finalizingStory()
	if i := strings.LastIndex(s, finalizingFrom); i >= 0 {
		return s[:i]
	}
	return s
}

// finalizedStory tells a finalization that is over.
func (p *pass) finalizedStory() string {
	s := p.finalizingStory()
	if i := strings.LastIndex(s, finalizingFrom); i >= 0 {
		return s[:i] + finalizedFrom + s[i+len(finalizingFrom):]
	}
	return s
}

// publicationStory tells what was durably published.
func (p *pass) publicationStory() string {
	pub, ok := p.latestPublication()
	if !ok || pub.BlocksCommitted == 0 && !pub.Settled {
		return "nothing published"
	}
	s := fmt.Sprintf("%d blocks published", pub.BlocksCommitted)
	if pub.BlocksPlanned > 0 {
		s = fmt.Sprintf("%d of %d blocks published", pub.BlocksCommitted, pub.BlocksPlanned)
	}
	if pub.Location != "" {
		s += " to " + pub.Location
	}
	return s
}

// runningMessage tells how far a working run is.
func (p *pass) runningMessage() string {
	w := p.lim.working()
	msg := fmt.Sprintf("attempt %d running: %d/%d model requests, %d/%d steps",
		p.cur, p.used.ModelRequests, max(w.ModelRequests, 0), p.steps, p.lim.maxSteps)
	if len(p.d.Directives) > 0 {
		parts := make([]string, 0, len(p.d.Directives))
		for _, d := range p.d.Directives {
			parts = append(parts, fmt.Sprintf("%s at %s", d.Type, d.Message))
		}
		msg += "; directives: " + strings.Join(parts, ", ")
	}
	return msg
}

// startingMessage tells that a replacement attempt is starting.
func (p *pass) startingMessage(story string) string {
	return fmt.Sprintf("%s; starting attempt %d of %d", story, p.cur, p.lim.maxAttempts)
}
