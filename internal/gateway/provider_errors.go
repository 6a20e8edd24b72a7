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

package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentrun-dev/agentrun/pkg/gatewayapi"
	"github.com/agentrun-dev/agentrun/pkg/textutil"
)

// A provider's error answer is not relayed as it came: the provider may be
// hostile or compromised, and its body may be of any size, hold anything,
// or echo the request's headers (the provider key). The agent gets the
// door's own error shape instead.

// MaxProviderErrorBytes bounds what the gateway reads of a provider's error
// answer; a longer body is not parsed (no provider message is relayed).
const MaxProviderErrorBytes = 64 << 10

// MaxProviderErrorMessage bounds the provider's message relayed in an
// error (bytes, after sanitizing).
const MaxProviderErrorMessage = 256

// maxProviderCode bounds the provider's error code relayed.
const maxProviderCode = 64

// redacted replaces a secret in a provider's message.
const redacted = "[redacted]"

// bearerToken is a bearer credential echoed in a provider's message.
var bearerToken = regexp.MustCompile(`(?i)bearer\s+[^\s"',;]+`)

// providerError is the door's answer to a provider's error answer (status
// not 200, body raw, at most MaxProviderErrorBytes read, truncated when
// cut): the provider's status when it is an error status (4xx, 5xx; 502
// otherwise), the error type of that status, the provider's error.code when
// it is a short identifier, and a message naming the model and the status,
// with the provider's error.message — when the body is well-formed JSON —
// sanitized: key (the provider key) and bearer tokens redacted, control and
// format characters dropped, whitespace folded, at most
// MaxProviderErrorMessage bytes. The raw bytes are never relayed. summary
// is the status and that message, for the attempt's Provider fault.
func providerError(model string, status int, raw []byte, truncated bool, key string) (e *apiError, summary string) {
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	var eb struct {
		Error *struct {
			Message any `json:"message"`
			Code    any `json:"code"`
		} `json:"error"`
	}
	var msg, code string
	if !truncated && json.Unmarshal(raw, &eb) == nil && eb.Error != nil {
		if m, ok := eb.Error.Message.(string); ok {
			msg = sanitizeProviderText(m, key)
		}
		if c, ok := eb.Error.Code.(string); ok && len(c) <= maxProviderCode && gatewayapi.FaultKind(c) != "" &&
			!strings.Contains(c, " ") && (key == "" || !strings.Contains(c, key)) {
			code = c
		}
	}
	summary = fmt.Sprintf("HTTP %d", status)
	if msg != "" {
		summary += ": " + msg
	} else {
		summary += " with no JSON error message"
	}
	return newError(status, providerErrorType(status), code,
		fmt.Sprintf("the provider of model %q answered %s (counted as a model request)", model, summary)), summary
}

// providerErrorType is the error type of a provider's error status.
func providerErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return gatewayapi.TypeRateLimit
	case status == http.StatusUnauthorized:
		return gatewayapi.TypeAuthentication
	case status == http.StatusForbidden:
		return gatewayapi.TypePermission
	case status == http.StatusNotFound:
		return gatewayapi.TypeNotFound
	case status >= 500:
		return gatewayapi.TypeServer
	}
	return gatewayapi.TypeInvalidRequest
}

// sanitizeProviderText makes a provider's text safe to show: key and bearer
// tokens redacted, control and format characters (ANSI escapes, bidi
// overrides) dropped, invalid UTF-8 replaced, whitespace folded, truncated to
// MaxProviderErrorMessage bytes.
func sanitizeProviderText(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, redacted)
	}
	s = bearerToken.ReplaceAllString(s, "Bearer "+redacted)
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == utf8.RuneError:
			return -1
		}
		return r
	}, s)
	return textutil.Truncate(strings.Join(strings.Fields(s), " "), MaxProviderErrorMessage)
}

// providerRetryHeaders are the provider's retry hints the agent's SDK
// obeys, when well-formed: Retry-After (seconds or an HTTP date) and
// X-Should-Retry (true or false).
func providerRetryHeaders(h http.Header) http.Header {
	out := http.Header{}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			out.Set("Retry-After", strconv.FormatUint(n, 10))
		} else if t, err := http.ParseTime(v); err == nil {
			out.Set("Retry-After", t.UTC().Format(http.TimeFormat))
		}
	}
	if v := strings.ToLower(strings.TrimSpace(h.Get(gatewayapi.HeaderShouldRetry))); v == "true" || v == "false" {
		out.Set(gatewayapi.HeaderShouldRetry, v)
	}
	return out
}
