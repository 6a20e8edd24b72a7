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

package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The identity map is bounded: full (idle) buckets are forgotten first,
// then the least recently used.
func TestLimiterBoundsIdentities(t *testing.T) {
	g := NewWithT(t)
	now := time.Unix(1_800_000_000, 0)
	l := newLimiter(1, 2, 3, func() time.Time { return now })
	for i := range 3 {
		g.Expect(l.allow(fmt.Sprint(i))).To(BeTrue())
		now = now.Add(time.Millisecond)
	}
	g.Expect(l.buckets).To(HaveLen(3))

	// No bucket is full yet: the least recently used ("0") goes.
	g.Expect(l.allow("3")).To(BeTrue())
	g.Expect(l.buckets).To(HaveLen(3))
	g.Expect(l.buckets).NotTo(HaveKey("0"))

	// After a second every bucket has refilled: all are forgotten at once.
	now = now.Add(2 * time.Second)
	g.Expect(l.allow("4")).To(BeTrue())
	g.Expect(l.buckets).To(HaveLen(1))
	g.Expect(l.buckets).To(HaveKey("4"))
}

// audit's hand-written encoding agrees with encoding/json.
func TestAppendJSONString(t *testing.T) {
	g := NewWithT(t)
	for _, s := range []string{"", "plain", `q"uote\back`, "nl\n\r\t\x00\x1f", "ünï©ødé ✓",
		"bad \xff\xfe utf8", "line\u2028sep\u2029", "<html> & co"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		g.Expect(enc.Encode(s)).To(Succeed())
		g.Expect(string(appendJSONString(nil, s))+"\n").To(Equal(want.String()), "%q", s)
	}
}

func TestAuditLineDecodesAsAuditRecord(t *testing.T) {
	g := NewWithT(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	call := &Call{Kind: KindModel, Namespace: "team", Run: "r\"1", Attempt: "a", Identity: "pod", Tool: "gpt",
		Arguments: map[string]any{"max_tokens": 10.0}}
	line := appendAuditRecord(nil, at, call, &Outcome{Result: "abc", Err: fmt.Errorf("upstream")})
	var rec AuditRecord
	g.Expect(json.Unmarshal(line, &rec)).To(Succeed())
	g.Expect(rec).To(Equal(AuditRecord{Time: at, Namespace: "team", Run: "r\"1", Attempt: "a", Identity: "pod",
		Kind: KindModel, Tool: "gpt", Arguments: map[string]any{"max_tokens": 10.0}, Outcome: OutcomeError, ResultBytes: 3}))
	g.Expect(line).To(HaveSuffix("}\n"))

	// Arguments that do not encode are left out, and the call is still recorded.
	call.Arguments = map[string]any{"x": math.Inf(1)}
	line = appendAuditRecord(nil, at, call, &Outcome{})
	rec = AuditRecord{}
	g.Expect(json.Unmarshal(line, &rec)).To(Succeed())
	g.Expect(rec.Arguments).To(BeNil())
	g.Expect(rec.ArgumentsError).To(ContainSubstring("unsupported value"))
	g.Expect(rec.Outcome).To(Equal(OutcomeOK))
}
