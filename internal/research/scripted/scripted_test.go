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

package scripted

import (
	"testing"

	. "github.com/onsi/gomega"
)

// A script is strict: unknown fields and calls without a tool name are
// refused. (The script's play is tested through the research agent:
// pkg/agent/research.)
func TestParse(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse([]byte("turns:\n- tool: [x]\n"))
	g.Expect(err).To(MatchError(ContainSubstring(`unknown field "tool"`)))
	_, err = Parse([]byte("turns:\n- tools: [{args: {}}]\n"))
	g.Expect(err).To(MatchError(ContainSubstring("has no name")))
}
