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

package gatewayapi

import (
	"strings"

	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// FunctionName is a tool's name as a function name of the chat-completions
// wire format, which may only contain ^[a-zA-Z0-9_-]{1,64}$:
// "report.publish" → "report_publish". Agents name the policy's tools so
// to their models; the gateway maps a model's proposed call back by it.
func FunctionName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return textutil.Cut(b.String(), 64)
}
