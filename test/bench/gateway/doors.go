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

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// The model door's ways through: each door passed through to a provider
// that speaks its API, and each translation pair. The gateway child's
// policy serves one model per provider API, all on the same fake upstream
// (which speaks the three), so a way is a door and a model.

// Models of the gateway child's policy, one per provider API.
const (
	modelChat      = "scripted"
	modelResponses = "scripted-responses"
	modelMessages  = "scripted-messages"
)

// benchModels are the child's models at upstreamURL.
func benchModels(upstreamURL string) []v1alpha1.Model {
	return []v1alpha1.Model{
		{Name: modelChat, BaseURL: upstreamURL, API: v1alpha1.ModelAPIOpenAIChat},
		{Name: modelResponses, BaseURL: upstreamURL, API: v1alpha1.ModelAPIOpenAIResponses},
		{Name: modelMessages, BaseURL: upstreamURL, API: v1alpha1.ModelAPIAnthropicMessages},
	}
}

// way is one way through the model door.
type way struct {
	// Name says the door and, when they differ, the provider's API.
	Name string
	// door is the route (agentrun_gateway_added_seconds' door label);
	// path its path.
	door, path string
	// body is the request, not streamed, for model.
	body []byte
	// firstToken says a streamed line carries the answer's first text.
	firstToken func(line []byte) bool
}

// The scripted answer every way asks for: the same text and usage.
const (
	benchSystem = "You are a research agent."
	benchPrompt = "Summarize the replication models of open-source vector databases."
	benchTurn   = `"agentrun_scripted":{"say":"Qdrant uses Raft for metadata; Milvus relies on a shared log and object storage.","tokens":120}`
)

func chatBody(model string) []byte {
	return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}],%s}`,
		model, benchSystem, benchPrompt, benchTurn)
}

func responsesBody(model string) []byte {
	return fmt.Appendf(nil, `{"model":%q,"instructions":%q,"input":%q,%s}`, model, benchSystem, benchPrompt, benchTurn)
}

func messagesBody(model string) []byte {
	return fmt.Appendf(nil, `{"model":%q,"max_tokens":1024,"system":%q,"messages":[{"role":"user","content":%q}],%s}`,
		model, benchSystem, benchPrompt, benchTurn)
}

// chatFirstToken is a chat chunk with content (the first chunk carries
// only the role, its content empty).
func chatFirstToken(line []byte) bool {
	return bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`))
}

func responsesFirstToken(line []byte) bool {
	return bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(`"response.output_text.delta"`))
}

func messagesFirstToken(line []byte) bool {
	return bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(`"text_delta"`))
}

// chatWay is the chat door passed through: the way of the grant race and
// the concurrent streams.
var chatWay = way{Name: "chat", door: "chat", path: "/v1/chat/completions", body: chatBody(modelChat), firstToken: chatFirstToken}

// ways are the model door's ways through: the three doors passed through,
// then the translation pairs.
var ways = []way{
	chatWay,
	{Name: "responses", door: "responses", path: "/v1/responses", body: responsesBody(modelResponses), firstToken: responsesFirstToken},
	{Name: "messages", door: "messages", path: "/v1/messages", body: messagesBody(modelMessages), firstToken: messagesFirstToken},
	{Name: "chat → Messages", door: "chat", path: "/v1/chat/completions", body: chatBody(modelMessages), firstToken: chatFirstToken},
	{Name: "Responses → chat", door: "responses", path: "/v1/responses", body: responsesBody(modelChat),
		firstToken: responsesFirstToken},
	{Name: "Messages → chat", door: "messages", path: "/v1/messages", body: messagesBody(modelChat), firstToken: messagesFirstToken},
}

// request is the way's body, streamed or not.
func (w way) request(stream bool) []byte {
	if !stream {
		return w.body
	}
	return append([]byte(`{"stream":true,`), w.body[1:]...)
}

// selectWays keeps the ways whose names are listed (comma-separated,
// "all": every way).
func selectWays(names string) ([]way, error) {
	if names == "all" {
		return ways, nil
	}
	var out []way
	for n := range strings.SplitSeq(names, ",") {
		i := slices.IndexFunc(ways, func(w way) bool { return strings.EqualFold(w.Name, strings.TrimSpace(n)) })
		if i < 0 {
			return nil, fmt.Errorf("--ways: no way %q (the ways: all, or some of %q)", n, wayNames())
		}
		out = append(out, ways[i])
	}
	return out, nil
}

func wayNames() []string {
	names := make([]string, 0, len(ways))
	for _, w := range ways {
		names = append(names, w.Name)
	}
	return names
}

// inProcess is what the gateway child reports of itself (/bench/inprocess):
// its added-time histogram per door and its allocations so far.
type inProcess struct {
	Doors      map[string]histogram `json:"doors"`
	Mallocs    uint64               `json:"mallocs"`
	TotalAlloc uint64               `json:"totalAlloc"`
	NumGC      uint32               `json:"numGC"`
	// PauseTotalNs is the garbage collector's stop-the-world time so far.
	PauseTotalNs uint64 `json:"pauseTotalNs"`
}

// histogram is a cumulative histogram: counts[i] observations at most
// bounds[i] seconds.
type histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// gatherInProcess reads the child's own figures from reg and the runtime.
func gatherInProcess(reg *prometheus.Registry) inProcess {
	out := inProcess{Doors: map[string]histogram{}}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "agentrun_gateway_added_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			door := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "door" {
					door = l.GetValue()
				}
			}
			h := histogram{Count: m.GetHistogram().GetSampleCount(), Sum: m.GetHistogram().GetSampleSum()}
			for _, b := range m.GetHistogram().GetBucket() {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Counts = append(h.Counts, b.GetCumulativeCount())
			}
			out.Doors[door] = h
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out.Mallocs, out.TotalAlloc, out.NumGC, out.PauseTotalNs = ms.Mallocs, ms.TotalAlloc, ms.NumGC, ms.PauseTotalNs
	return out
}

// serveInProcess answers /bench/inprocess.
func serveInProcess(reg *prometheus.Registry) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(gatherInProcess(reg))
	}
}

func (s *server) inProcess(hc *http.Client) (inProcess, error) {
	var ip inProcess
	resp, err := hc.Get(s.url + "/bench/inprocess")
	if err != nil {
		return ip, err
	}
	defer func() { _ = resp.Body.Close() }()
	return ip, json.NewDecoder(resp.Body).Decode(&ip)
}

// since is h less before (the observations made in between).
func (h histogram) since(before histogram) histogram {
	out := histogram{Bounds: h.Bounds, Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	for i, c := range h.Counts {
		if i < len(before.Counts) {
			c -= before.Counts[i]
		}
		out.Counts = append(out.Counts, c)
	}
	return out
}

// quantile is the q-quantile in milliseconds, interpolated linearly within
// its bucket as Prometheus' histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, c := range h.Counts {
		if float64(c) >= rank {
			in := float64(c - below)
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / in
			}
			return (lower + (h.Bounds[i]-lower)*frac) * 1000
		}
		lower, below = h.Bounds[i], c
	}
	return lower * 1000 // beyond the last bound
}

// under is the share of observations at most bound seconds (a bucket bound).
func (h histogram) under(bound float64) float64 {
	if h.Count == 0 {
		return 0
	}
	i := slices.IndexFunc(h.Bounds, func(b float64) bool { return math.Abs(b-bound) < bound*1e-9 })
	if i < 0 {
		return math.NaN()
	}
	return float64(h.Counts[i]) / float64(h.Count)
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(raw))[0]
}

// cpusAllowed is the CPU list process pid may run on ("self" for this one).
func cpusAllowed(pid string) string {
	raw, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
