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

// Package textutil holds the text helpers the operator and the agent SDK
// share, so that each idea has one implementation.
package textutil

import "unicode/utf8"

// Ellipsis marks where Truncate cut a string.
const Ellipsis = "…"

// Truncate shortens s to at most n bytes, the bound API fields such as
// status.message are given in. It cuts on a rune boundary, so the result is
// valid UTF-8 whenever s is, and ends the cut string with Ellipsis (when n
// leaves room for it). A string that fits is returned as it is.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	mark := Ellipsis
	if n < len(mark) {
		mark = ""
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Cut shortens s to at most n bytes on a rune boundary, without a mark: for
// identifiers cut to a length (label values, ConfigMap keys, function names),
// where an ellipsis would make them invalid.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
