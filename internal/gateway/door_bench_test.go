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

package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// cannedUpstream answers each provider API, streamed or not, with the
// bytes the scripted upstream answered once: the provider costs the
// benchmark nothing but a copy, so what it measures is the gateway's.
type cannedUpstream map[string][]byte

func cannedKey(path string, stream bool) string { return fmt.Sprintf("%s stream=%t", path, stream) }

func (c cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	path := r.URL.Path[strings.LastIndex(r.URL.Path, "/v1")+3:]
	raw, ok := c[cannedKey(path, bytes.Contains(body, []byte(`"stream":true`)))]
	if !ok {
		return nil, fmt.Errorf("no canned answer for %s", r.URL.Path)
	}
	ct := "application/json"
	if bytes.HasPrefix(raw, []byte("data:")) || bytes.HasPrefix(raw, []byte("event:")) {
		ct = "text/event-stream"
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {ct}},
		Body: io.NopCloser(bytes.NewReader(raw)), Request: r}, nil
}

// The model of each provider API in the benchmark's policy.
const (
	benchChatModel      = "chat-up"
	benchResponsesModel = "responses-up"
	benchMessagesModel  = "messages-up"
	benchTurn           = `"agentrun_scripted":{"say":"Qdrant uses Raft for metadata; Milvus relies on a shared log.","tokens":120}`
)

func benchChat(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"system","content":"You are a research agent."},` +
		`{"role":"user","content":"Summarize the replication models of vector databases."}],` + benchTurn + `}`
}

func benchResponses(model string) string {
	return `{"model":"` + model + `","instructions":"You are a research agent.",` +
		`"input":"Summarize the replication models of vector databases.",` + benchTurn + `}`
}

func benchMessages(model string) string {
	return `{"model":"` + model + `","max_tokens":1024,"system":"You are a research agent.",` +
		`"messages":[{"role":"user","content":"Summarize the replication models of vector databases."}],` + benchTurn + `}`
}

// doorWays are the model door's ways through: each door passed through,
// and each translation pair.
var doorWays = []struct{ name, path, body string }{
	{"chat", "/v1/chat/completions", benchChat(benchChatModel)},
	{"responses", "/v1/responses", benchResponses(benchResponsesModel)},
	{"messages", "/v1/messages", benchMessages(benchMessagesModel)},
	{"chat-to-Messages", "/v1/chat/completions", benchChat(benchMessagesModel)},
	{"Responses-to-chat", "/v1/responses", benchResponses(benchChatModel)},
	{"Messages-to-chat", "/v1/messages", benchMessages(benchChatModel)},
}

func streamed(body string) string { return `{"stream":true,` + body[1:] }

// recordCanned asks the scripted upstream each provider API's answer once.
func recordCanned(b *testing.B) cannedUpstream {
	up := &upstream.Server{}
	c := cannedUpstream{}
	for _, w := range []struct{ path, body string }{
		{"/chat/completions", benchChat("m")}, {"/responses", benchResponses("m")}, {"/messages", benchMessages("m")},
	} {
		for _, stream := range []bool{false, true} {
			body := w.body
			if stream {
				body = streamed(body)
				if w.path == "/chat/completions" {
					body = `{"stream_options":{"include_usage":true},` + body[1:]
				}
			}
			rec := httptest.NewRecorder()
			up.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1"+w.path, strings.NewReader(body)))
			if rec.Code != http.StatusOK {
				b.Fatalf("upstream %s: %d %s", w.path, rec.Code, rec.Body)
			}
			c[cannedKey(w.path, stream)] = rec.Body.Bytes()
		}
	}
	return c
}

// BenchmarkModelDoor serves one model request through each way, streamed
// and not, by the gateway's handler in this process against a canned
// provider: its time, and its allocations (-benchmem), per request.
func BenchmarkModelDoor(b *testing.B) {
	canned := recordCanned(b)
	e := gatewaytest.Start(b, gatewaytest.Options{
		// Counts are written coalesced, a status write a flush interval
		// (a second in agentrun-gateway): none in the benchmark's time,
		// which measures the request's own work.
		FlushInterval: time.Hour,
		Mutate: func(ra *v1alpha1.RunAttempt) {
			ra.Spec.Grant.ModelRequests = 1 << 40
			ra.Spec.Policy.Models = []v1alpha1.Model{
				{Name: benchChatModel, BaseURL: "http://provider/v1", API: v1alpha1.ModelAPIOpenAIChat},
				{Name: benchResponsesModel, BaseURL: "http://provider/v1", API: v1alpha1.ModelAPIOpenAIResponses},
				{Name: benchMessagesModel, BaseURL: "http://provider/v1", API: v1alpha1.ModelAPIAnthropicMessages},
			}
		},
		Tune: func(o *gateway.Options) { o.Upstream = &http.Client{Transport: canned} },
	})
	h := e.Gateway.Handler()
	for _, w := range doorWays {
		for _, stream := range []bool{false, true} {
			body, name := w.body, w.name
			if stream {
				body, name = streamed(body), name+"-stream"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, w.path, strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+gatewaytest.Token)
					out := &discardWriter{header: http.Header{}}
					h.ServeHTTP(out, req)
					if out.code != http.StatusOK {
						b.Fatalf("%s: %d", name, out.code)
					}
				}
			})
		}
	}
}

// discardWriter is a client that reads nothing: the benchmark's answers
// cost it no copy.
type discardWriter struct {
	header http.Header
	code   int
}

func (d *discardWriter) Header() http.Header { return d.header }

func (d *discardWriter) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return len(p), nil
}

func (d *discardWriter) Flush() {}
