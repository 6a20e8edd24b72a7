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

package chain_test

import (
	"context"
	"maps"
	"reflect"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

func TestRedactArguments(t *testing.T) {
	const r = chain.Redacted
	tests := map[string]struct {
		in, want map[string]any
	}{
		"secret keys in any case and spelling": {
			in: map[string]any{"password": "p", "API_KEY": "k", "Api-Key": "k2", "client_secret": "s",
				"access_token": "t", "Authorization": "Basic dXNlcjpwYXNz", "x-api-key": 42, "url": "https://x"},
			want: map[string]any{"password": r, "API_KEY": r, "Api-Key": r, "client_secret": r,
				"access_token": r, "Authorization": r, "x-api-key": r, "url": "https://x"},
		},
		"nested maps and lists": {
			in: map[string]any{"request": map[string]any{"headers": []any{
				map[string]any{"name": "X", "token": "t"}, "plain",
			}, "credentials": map[string]any{"user": "u", "pass": "p"}}},
			want: map[string]any{"request": map[string]any{"headers": []any{
				map[string]any{"name": "X", "token": r}, "plain",
			}, "credentials": r}},
		},
		"secrets inside other strings": {
			in: map[string]any{"cmd": "curl -H 'Authorization: Bearer abcdefgh12345' https://x",
				"env": []any{"OPENAI=sk-abcdefghijklmnop1234"}, "labels": map[string]string{"secret": "s", "a": "b"}},
			want: map[string]any{"cmd": "curl -H 'Authorization: Bearer [REDACTED]' https://x",
				"env": []any{"OPENAI=" + r}, "labels": map[string]string{"secret": r, "a": "b"}},
		},
		"what only looks like a secret key is kept": {
			in:   map[string]any{"max_tokens": 100, "total_tokens": 3, "tokenizer": "cl100k", "secret_name": "db"},
			want: map[string]any{"max_tokens": 100, "total_tokens": 3, "tokenizer": "cl100k", "secret_name": "db"},
		},
		"empty and nil values stay": {
			in:   map[string]any{"password": "", "token": nil},
			want: map[string]any{"password": "", "token": nil},
		},
		"nil": {in: nil, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			before := deepCopy(tc.in)
			got := chain.RedactArguments(tc.in)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(tc.in).To(Equal(before), "the input is never changed")
			if reflect.DeepEqual(tc.in, tc.want) && tc.in != nil {
				g.Expect(reflect.ValueOf(got).UnsafePointer()).To(Equal(reflect.ValueOf(tc.in).UnsafePointer()),
					"nothing to redact: the same map, no copy")
			}
		})
	}
}

func deepCopy(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range m {
		switch t := v.(type) {
		case map[string]any:
			out[k] = deepCopy(t)
		case []any:
			l := make([]any, len(t))
			for i, e := range t {
				if em, ok := e.(map[string]any); ok {
					l[i] = deepCopy(em)
				} else {
					l[i] = e
				}
			}
			out[k] = l
		case map[string]string:
			out[k] = maps.Clone(t)
		default:
			out[k] = v
		}
	}
	return out
}

func TestRedactText(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"OpenAI key":      {"key: sk-proj-AbCdEf0123456789_-xyz end", "key: [REDACTED] end"},
		"short sk- kept":  {"sk-short and task-0123456789abcdefghij", "sk-short and task-0123456789abcdefghij"},
		"bearer":          {"Authorization: Bearer eyJhbGciOi.eyJzdWIi.sig", "Authorization: Bearer [REDACTED]"},
		"bearer any case": {"authorization: bearer abcdefgh12345678", "authorization: bearer [REDACTED]"},
		"prose kept":      {"Bearer tokens are short-lived", "Bearer tokens are short-lived"},
		"AWS access key":  {"aws_access_key_id=AKIAIOSFODNN7EXAMPLE\n", "aws_access_key_id=[REDACTED]\n"},
		"GitHub token":    {"GH=ghp_0123456789abcdefghijABCDEFGHIJ012345", "GH=[REDACTED]"},
		"private key": {
			"a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----\nb",
			"a\n[REDACTED]\nb",
		},
		"truncated private key": {"x -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz", "x [REDACTED]"},
		"public key kept": {
			"-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
			"-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----",
		},
		"several": {"sk-aaaaaaaaaaaaaaaaaaaa and AKIAABCDEFGHIJKLMNOP", "[REDACTED] and [REDACTED]"},
		"nothing": {"a high-level summary", "a high-level summary"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(chain.RedactText(tc.in)).To(Equal(tc.want))
		})
	}
}

// redact as Pre cleans the arguments before dispatch; as Post it cleans the
// result (and the arguments audit sees). The caller's map is never changed.
func TestRedactInterceptor(t *testing.T) {
	g := NewWithT(t)
	reg := chain.Builtins(chain.BuiltinOptions{})
	asPre := []v1alpha1.ResolvedInterceptor{pre(chain.NameRedact, v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false)}
	c, _ := newChain(t, asPre, reg)
	call := toolCall()
	args := map[string]any{"password": "hunter2", "q": "x"}
	call.Arguments = args
	var dispatched map[string]any
	out, ref := c.Run(context.Background(), call, func(_ context.Context, call *chain.Call) chain.Outcome {
		dispatched = call.Arguments
		return chain.Outcome{Result: "sk-abcdefghijklmnopqrstuv"}
	})
	g.Expect(ref).NotTo(HaveOccurred())
	g.Expect(dispatched).To(Equal(map[string]any{"password": chain.Redacted, "q": "x"}))
	g.Expect(out.Result).To(Equal("sk-abcdefghijklmnopqrstuv"), "as Pre it does not touch the result")
	g.Expect(args).To(HaveKeyWithValue("password", "hunter2"))

	asPost := []v1alpha1.ResolvedInterceptor{post(chain.NameRedact, v1alpha1.ClassSecurity, v1alpha1.PostureDeny, false)}
	c2, _ := newChain(t, asPost, reg)
	call = toolCall()
	call.Arguments = args
	out, ref = c2.Run(context.Background(), call, func(_ context.Context, call *chain.Call) chain.Outcome {
		dispatched = call.Arguments
		return chain.Outcome{Result: "sk-abcdefghijklmnopqrstuv", IsError: true}
	})
	g.Expect(ref).NotTo(HaveOccurred())
	g.Expect(dispatched).To(HaveKeyWithValue("password", "hunter2"))
	g.Expect(out).To(Equal(chain.Outcome{Result: chain.Redacted, IsError: true}))
	g.Expect(call.Arguments).To(HaveKeyWithValue("password", chain.Redacted))
	g.Expect(args).To(HaveKeyWithValue("password", "hunter2"))
}
