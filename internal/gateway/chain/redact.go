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
	"context"
	"maps"
	"regexp"
	"strings"
)

// Redacted replaces every secret RedactArguments and RedactText find.
const Redacted = "[REDACTED]"

// secretKeySuffixes: an argument whose key, lowercased and without '-', '_'
// and '.', ends with one of these holds a secret (password, api_key,
// client_secret, access_token, X-Api-Key, Authorization, ...). "token" is a
// suffix, not a substring, so max_tokens and total_tokens are kept.
var secretKeySuffixes = []string{
	"password", "passwd", "passphrase", "secret", "token", "apikey", "authorization",
	"privatekey", "accesskey", "credential", "credentials", "cookie", "sessionid",
}

func isSecretKey(key string) bool {
	var buf [64]byte
	n := 0
	for i := 0; i < len(key); i++ {
		b := key[i]
		switch {
		case b == '-' || b == '_' || b == '.' || b == ' ':
			continue
		case 'A' <= b && b <= 'Z':
			b += 'a' - 'A'
		}
		if n == len(buf) { // long keys: keep the tail, which is what suffixes look at
			copy(buf[:], buf[1:])
			n--
		}
		buf[n] = b
		n++
	}
	norm := buf[:n]
	for _, s := range secretKeySuffixes {
		if len(norm) >= len(s) && string(norm[len(norm)-len(s):]) == s {
			return true
		}
	}
	return false
}

// RedactArguments returns args with every secret replaced by "[REDACTED]":
// the whole value of a key that names a secret (see secretKeySuffixes,
// case-insensitive, at any depth), and the secrets RedactText finds in
// every other string. It never changes args: when something is redacted
// it returns a copy (sharing what it did not change); otherwise args itself.
func RedactArguments(args map[string]any) map[string]any {
	out, _ := redactMap(args)
	return out
}

func redactMap(m map[string]any) (map[string]any, bool) {
	var out map[string]any
	for k, v := range m {
		nv, changed := redactValue(k, v)
		if !changed {
			continue
		}
		if out == nil {
			out = maps.Clone(m)
		}
		out[k] = nv
	}
	if out == nil {
		return m, false
	}
	return out, true
}

func redactValue(key string, v any) (any, bool) {
	if key != "" && isSecretKey(key) {
		if s, ok := v.(string); ok && (s == "" || s == Redacted) {
			return v, false
		}
		if v == nil {
			return v, false
		}
		return Redacted, true
	}
	switch t := v.(type) {
	case string:
		if r := RedactText(t); r != t {
			return r, true
		}
		return v, false
	case map[string]any:
		return redactMap(t)
	case []any:
		var out []any
		for i, e := range t {
			ne, changed := redactValue("", e)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), t...)
			}
			out[i] = ne
		}
		if out == nil {
			return v, false
		}
		return out, true
	case map[string]string:
		var out map[string]string
		for k, s := range t {
			var ns string
			if isSecretKey(k) && s != "" {
				ns = Redacted
			} else {
				ns = RedactText(s)
			}
			if ns == s {
				continue
			}
			if out == nil {
				out = maps.Clone(t)
			}
			out[k] = ns
		}
		if out == nil {
			return v, false
		}
		return out, true
	case []string:
		var out []string
		for i, s := range t {
			if ns := RedactText(s); ns != s {
				if out == nil {
					out = append([]string(nil), t...)
				}
				out[i] = ns
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	}
	return v, false
}

// secretText matches the secrets RedactText removes: private key blocks
// (to their END line, or to the end of a truncated text), OpenAI-style
// keys (sk-...), GitHub tokens, AWS access key ids, and bearer tokens.
var secretText = regexp.MustCompile(
	`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*$)` +
		`|\bsk-[A-Za-z0-9_-]{16,}` +
		`|\bgh[pousr]_[A-Za-z0-9]{36,}` +
		`|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b` +
		`|(?i:\bbearer)\s+[A-Za-z0-9._~+/=-]{8,}`)

// RedactText returns s with every secret secretText matches replaced by
// "[REDACTED]" ("Bearer [REDACTED]" for a bearer token, so the text still
// reads).
func RedactText(s string) string {
	if !maybeSecret(s) {
		return s
	}
	return secretText.ReplaceAllStringFunc(s, func(m string) string {
		if len(m) > 6 && strings.EqualFold(m[:6], "bearer") {
			return m[:6] + " " + Redacted
		}
		return Redacted
	})
}

// maybeSecret is a cheap filter: no text without one of these markers can
// match secretText.
func maybeSecret(s string) bool {
	return strings.Contains(s, "sk-") || strings.Contains(s, "PRIVATE KEY") ||
		strings.Contains(s, "AKIA") || strings.Contains(s, "ASIA") ||
		hasGitHubToken(s) || containsFold(s, "bearer")
}

// hasGitHubToken reports whether s contains a GitHub token prefix
// (ghp_, gho_, ghu_, ghs_, ghr_).
func hasGitHubToken(s string) bool {
	for {
		i := strings.Index(s, "gh")
		if i < 0 || i+3 >= len(s) {
			return false
		}
		if s[i+3] == '_' && strings.IndexByte("pousr", s[i+2]) >= 0 {
			return true
		}
		s = s[i+2:]
	}
}

// containsFold reports whether s contains the lowercase ASCII word sub in
// any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if (s[i]|0x20) == sub[0] && strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// redactImpl is the built-in redact interceptor. As Pre it redacts the
// arguments before dispatch (the tool then sees "[REDACTED]"); as Post it
// redacts the arguments (for audit) and the result the caller gets.
func redactImpl() Impl {
	return Impl{
		Pre: func(_ context.Context, call *Call) error {
			call.Arguments = RedactArguments(call.Arguments)
			return nil
		},
		Post: func(_ context.Context, call *Call, out *Outcome) error {
			call.Arguments = RedactArguments(call.Arguments)
			out.Result = RedactText(out.Result)
			return nil
		},
	}
}
