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
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/gatewaytest"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/sse"
	"github.com/agentrun-dev/agentrun/internal/stream/store"
)

// stampingUpstream streams n text chunks, pause apart, each carrying the
// time it was written: "<unix nanoseconds>;".
func stampingUpstream(n int, pause time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fl := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(chunk map[string]any) {
			raw, _ := json.Marshal(chunk)
			_, _ = fmt.Fprintf(w, "data: %s\n\n", raw)
			fl.Flush()
		}
		choice := func(delta map[string]any, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk",
				"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		send(choice(map[string]any{"role": "assistant", "content": ""}, nil))
		for range n {
			time.Sleep(pause)
			send(choice(map[string]any{"content": strconv.FormatInt(time.Now().UnixNano(), 10) + ";"}, nil))
		}
		send(choice(map[string]any{}, "stop"))
		c := choice(map[string]any{}, nil)
		c["choices"], c["usage"] = []any{}, map[string]int{"total_tokens": 10}
		send(c)
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		fl.Flush()
	})
}

// BenchmarkDeltaLatencyUpstreamToSSE: the latency of a model stream's text
// delta from the byte the upstream wrote to the SSE client that parsed it,
// through the whole path — the gateway's model door and translator, its
// producer buffer, an embedded NATS JetStream store, the SSE handler — one
// chunk per pause over loopback; p50 and p99 reported. b.N is the number
// of deltas.
func BenchmarkDeltaLatencyUpstreamToSSE(b *testing.B) {
	st, err := store.Open(b.Context(), store.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	prod := store.NewProducer(st, store.ProducerOptions{})
	go prod.Run(b.Context())

	up := httptest.NewServer(stampingUpstream(b.N, time.Millisecond))
	defer up.Close()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gatewaytest.Namespace, Name: "provider",
		Labels: map[string]string{v1alpha1.LabelProviderKey: "true"}}, Data: map[string][]byte{"key": []byte("sk-1")}}
	e := gatewaytest.Start(b, gatewaytest.Options{Objects: []client.Object{secret}, Events: prod,
		Mutate: func(ra *v1alpha1.RunAttempt) {
			for i := range ra.Spec.Policy.Models {
				ra.Spec.Policy.Models[i].BaseURL = up.URL + "/v1"
			}
			ra.Spec.Grant.ModelRequests = 1000
		}})
	run := stream.RunKey{Namespace: gatewaytest.Namespace, Name: gatewaytest.Run, UID: gatewaytest.RunUID}
	h, err := sse.New(sse.Options{Source: st, Authorizer: sse.AllowAll,
		RunUID: func(context.Context, stream.RunKey) (string, bool, error) { return run.UID, true, nil }})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequestWithContext(b.Context(), http.MethodGet, srv.URL+sse.Path(run)+"?after=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()

	lat := make([]time.Duration, 0, b.N)
	done := make(chan error, 1)
	go func() { done <- readDeltas(resp.Body, b.N, &lat) }()
	b.ResetTimer()
	model := e.Do(http.MethodPost, "/v1/chat/completions", gatewaytest.Token,
		[]byte(`{"model":"scripted","stream":true,"messages":[{"role":"user","content":"go"}]}`))
	_, _ = io.Copy(io.Discard, model.Body)
	_ = model.Body.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// readDeltas parses SSE messages until n stamps have arrived in text
// deltas, recording each stamp's age. A merged delta carries several.
func readDeltas(body io.Reader, n int, lat *[]time.Duration) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev stream.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return err
		}
		if ev.Type != stream.TextMessageContent {
			continue
		}
		now := time.Now()
		for s := range strings.SplitSeq(strings.TrimSuffix(ev.Delta, ";"), ";") {
			ns, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("delta %q: %w", ev.Delta, err)
			}
			*lat = append(*lat, now.Sub(time.Unix(0, ns)))
		}
		if len(*lat) >= n {
			return nil
		}
	}
	return fmt.Errorf("the stream ended after %d of %d deltas: %v", len(*lat), n, sc.Err())
}
