//go:build e2e

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

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/stream"
	"github.com/agentrun-dev/agentrun/internal/stream/sse"
	"github.com/agentrun-dev/agentrun/internal/upstream"
)

// sseEvent is one message of a run stream as a client reads it.
type sseEvent struct {
	id  string
	ev  stream.Event
	raw string
}

// sseReader reads a run stream's messages.
type sseReader struct {
	resp *http.Response
	br   *bufio.Reader
}

func (r *sseReader) next() (sseEvent, error) {
	var m sseEvent
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			return m, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "" && m.raw != "":
			return m, json.Unmarshal([]byte(m.raw), &m.ev)
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			m.raw = strings.TrimPrefix(line, "data: ")
		}
	}
}

func (r *sseReader) close() { _ = r.resp.Body.Close() }

func eventsURL(ns, run string) string {
	return st.StreamURL + "/apis/stream.agentrun.dev/v1/namespaces/" + ns + "/researchruns/" + run + "/events"
}

// streamGet asks for a run's events as token (none if empty), resuming
// after lastID if set, over client (http.DefaultClient if nil).
func streamGet(c *http.Client, token, ns, run, lastID, query string) *http.Response {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, eventsURL(ns, run)+query, nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred())
	return resp
}

func openStream(c *http.Client, token, ns, run, lastID string) *sseReader {
	GinkgoHelper()
	resp := streamGet(c, token, ns, run, lastID, "")
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		Fail(fmt.Sprintf("GET events: HTTP %d: %s", resp.StatusCode, body))
	}
	return &sseReader{resp: resp, br: bufio.NewReaderSize(resp.Body, 64<<10)}
}

// exported is the run's whole trajectory (?format=jsonl).
func exported(token, ns, run string) []stream.Event {
	GinkgoHelper()
	resp := streamGet(nil, token, ns, run, "", "?format=jsonl")
	defer func() { _ = resp.Body.Close() }()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var out []stream.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev stream.Event
		Expect(json.Unmarshal(sc.Bytes(), &ev)).To(Succeed(), sc.Text())
		out = append(out, ev)
	}
	return out
}

func isEnd(ev stream.Event) bool { return ev.Type == stream.RunFinished || ev.Type == stream.RunError }

// textOf concatenates the text deltas of evs.
func textOf(evs []stream.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == stream.TextMessageContent {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

// tokenOf returns a token of service account name in ns (created without
// any role if it does not exist), issued for the stream server's audience.
func tokenOf(ns, name string) string {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	_ = st.Client.Create(ctx, sa)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{sse.DefaultAudience}}}
	Expect(st.Client.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
	return tr.Status.Token
}

// streamedTurn is a scripted model answer streamed in chunks of 16 bytes,
// pause apart.
func streamedTurn(think, say string, pause time.Duration) string {
	raw, _ := json.Marshal(upstream.Turn{Think: think, Say: say, Tokens: 30, ChunkDelayMS: int(pause / time.Millisecond)})
	return string(raw)
}

// streamedRun runs the miniagent with one streamed model request.
func (w *world) streamedRun(name, turn string) {
	w.run(name, imageMiniAgent, nil, func(r *v1.ResearchRun) {
		r.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MINIAGENT_TURN", Value: turn}}
	})
}

var _ = Describe("The run stream", Ordered, Label("stream"), func() {
	var w *world
	var viewer string
	say := strings.Repeat("Raft elects a leader, then replicates a log. ", 12)

	BeforeAll(func() {
		w = newWorld(nil)
		var err error
		viewer, err = st.ViewerToken(ctx, w.ns, "viewer")
		Expect(err).NotTo(HaveOccurred())
	})

	It("serves a snapshot first, resumes after Last-Event-ID without gap or duplicate, and exports the trajectory", func() {
		w.streamedRun("streamed", streamedTurn("The user wants the consensus basics.", say, 40*time.Millisecond))

		By("a new subscriber gets a STATE_SNAPSHOT first")
		r := openStream(nil, viewer, w.ns, "streamed", "")
		first, err := r.next()
		Expect(err).NotTo(HaveOccurred())
		Expect(first.ev.Type).To(Equal(stream.StateSnapshot))
		Expect(first.ev.Seq).To(BeZero(), "the snapshot has no seq of its own; its id is the last event it includes")
		got := []sseEvent{}
		By("reading until the text block is under way, then dropping the connection")
		texts := 0
		for texts < 3 {
			m, err := r.next()
			Expect(err).NotTo(HaveOccurred())
			got = append(got, m)
			if m.ev.Type == stream.TextMessageContent {
				texts++
			}
			Expect(isEnd(m.ev)).To(BeFalse(), "the run ended before the text streamed: pace it slower")
		}
		r.close()
		last := got[len(got)-1].id

		By("reconnecting with Last-Event-ID " + last)
		r = openStream(nil, viewer, w.ns, "streamed", last)
		for {
			m, err := r.next()
			Expect(err).NotTo(HaveOccurred())
			Expect(m.ev.Type).NotTo(Equal(stream.StateSnapshot), "a resumed stream has no snapshot")
			got = append(got, m)
			if isEnd(m.ev) {
				break
			}
		}
		r.close()
		run := w.terminated("streamed", v1.ReasonCompleted, v1.SettlementComplete)

		By("the events received are exactly the stored ones after the snapshot: no gap, no duplicate")
		snap, _ := strconv.ParseUint(first.id, 10, 64)
		all := exported(viewer, w.ns, "streamed")
		for i, ev := range all {
			Expect(ev.Seq).To(Equal(uint64(i+1)), "the export is the whole trajectory from seq 1, without gaps")
		}
		var want, received []uint64
		for _, ev := range all {
			if ev.Seq > snap && ev.Seq <= all[len(all)-1].Seq {
				want = append(want, ev.Seq)
			}
		}
		var evs []stream.Event
		for _, m := range got {
			Expect(m.id).To(Equal(strconv.FormatUint(m.ev.Seq, 10)))
			received = append(received, m.ev.Seq)
			evs = append(evs, m.ev)
		}
		// The run may store events after its end (none today); the client
		// stopped at the end.
		Expect(received).To(Equal(want[:len(received)]))
		Expect(textOf(evs)).To(Equal(textOf(all)))
		Expect(textOf(all)).To(Equal(say), "the model's text, streamed through the gateway, block for block")

		By("the trajectory has the status watcher's and the gateway's events")
		types := map[stream.EventType]int{}
		for _, ev := range all {
			types[ev.Type]++
		}
		Expect(types).To(HaveKeyWithValue(stream.RunStarted, 1))
		Expect(types).To(HaveKeyWithValue(stream.RunFinished, 1))
		Expect(types).To(HaveKeyWithValue(stream.ReasoningStart, 1))
		Expect(types).To(HaveKeyWithValue(stream.TextMessageStart, 1))
		Expect(types).To(HaveKey(stream.StateDelta))
		Expect(types).To(HaveKey(stream.ToolCallResult), "report.publish, through the agent API")
		end := all[len(all)-1]
		Expect(end.Type).To(Equal(stream.RunFinished))
		Expect(string(end.Result)).To(ContainSubstring(string(run.Status.Reason)))

		By("a subscriber of an ended run gets its final state as the snapshot")
		r = openStream(nil, viewer, w.ns, "streamed", "")
		m, err := r.next()
		r.close()
		Expect(err).NotTo(HaveOccurred())
		Expect(m.ev.Type).To(Equal(stream.StateSnapshot))
		Expect(string(m.ev.Snapshot)).To(ContainSubstring(`"phase":"Terminated"`))
		Expect(m.id).To(Equal(strconv.FormatUint(end.Seq, 10)))
	})

	It("answers bad requests with a Status naming the rule", func() {
		status := func(token, run, lastID string) (int, string) {
			resp := streamGet(nil, token, w.ns, run, lastID, "")
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		code, body := status("", "streamed", "")
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		code, body = status(tokenOf(w.ns, "outsider"), "streamed", "")
		Expect(code).To(Equal(http.StatusForbidden), body)
		Expect(body).To(And(ContainSubstring(`cannot get resource \"researchruns\"`), ContainSubstring("outsider")))
		code, body = status(viewer, "no-such-run", "")
		Expect(code).To(Equal(http.StatusNotFound), body)
		code, body = status(viewer, "streamed", "999999")
		Expect(code).To(Equal(http.StatusGone), body)
		Expect(body).To(ContainSubstring("oldestSeq"))
	})

	It("bounds a slow client: its queue merges deltas, it gets every final and the whole text; a fast one is not slowed", func() {
		// 6,000 deltas of 16 bytes, about 1.5 MB of SSE: more than the
		// sockets between server and slow client hold.
		long := strings.Repeat("abcdefghijklmnop", 6000)
		w.streamedRun("firehose", streamedTurn("", long, 0))
		bounded := func() float64 {
			return metricAt(st.StreamMetricsURL, "agentrun_stream_subscriber_merged_total") +
				metricAt(st.StreamMetricsURL, "agentrun_stream_subscriber_overflows_total")
		}
		before := bounded()

		By("a slow client with a tiny receive buffer that reads nothing until the run ends")
		slowClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
			}}).DialContext}}
		slow := openStream(slowClient, viewer, w.ns, "firehose", "0")
		fast := openStream(nil, viewer, w.ns, "firehose", "0")
		var fastEvs []stream.Event
		for {
			m, err := fast.next()
			Expect(err).NotTo(HaveOccurred())
			fastEvs = append(fastEvs, m.ev)
			if isEnd(m.ev) {
				break
			}
		}
		fast.close()
		Expect(textOf(fastEvs)).To(Equal(long))

		By("the slow client reads at last: merged deltas, the same text, every final in order")
		var slowEvs []stream.Event
		reconnects := 0
		lastID := "0"
		for {
			m, err := slow.next()
			Expect(err).NotTo(HaveOccurred())
			if m.ev.Type == stream.Custom && m.ev.Name == "agentrun.dev/reconnect" {
				// Told to reconnect: resume exactly after the last event it got.
				reconnects++
				slow.close()
				slow = openStream(nil, viewer, w.ns, "firehose", lastID)
				continue
			}
			lastID = m.id
			slowEvs = append(slowEvs, m.ev)
			if isEnd(m.ev) {
				break
			}
		}
		slow.close()
		// A subscription's merges are counted when it ends.
		Eventually(bounded).Should(BeNumerically(">", before),
			"the slow client's queue reached its bound: deltas merged, or the client told to reconnect")
		Expect(textOf(slowEvs)).To(Equal(long))
		finals := func(evs []stream.Event) (out []uint64) {
			for _, ev := range evs {
				if ev.Final() {
					out = append(out, ev.Seq)
				}
			}
			return out
		}
		Expect(finals(slowEvs)).To(Equal(finals(fastEvs)))
		Expect(len(slowEvs)).To(BeNumerically("<", len(fastEvs)), "some deltas reached the slow client merged")
		_, _ = fmt.Fprintf(GinkgoWriter, "fast client: %d events; slow client: %d events, %d reconnects\n",
			len(fastEvs), len(slowEvs), reconnects)
	})

	It("is a side path: with the stream server down, a run ends as it would, and its events arrive once it is back", func() {
		By("stopping agentrun-stream")
		st.Stream.Stop(10 * time.Second)
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(st.StartStream(context.WithoutCancel(ctx))).To(Succeed())
			}
		})
		w.streamedRun("unaffected", streamedTurn("think", say, 5*time.Millisecond))
		run := w.terminated("unaffected", v1.ReasonCompleted, v1.SettlementComplete)
		Expect(run.Status.Attempt).To(Equal(int32(1)), "as the same run with the stream up: one attempt")
		Expect(gatewayMetric("agentrun_stream_producer_buffered")).To(BeNumerically(">", 0),
			"the gateway keeps the run's events while the stream is down")

		By("starting agentrun-stream again")
		Expect(st.StartStream(ctx)).To(Succeed())
		restarted = true
		Eventually(func(g Gomega) {
			all := exported(viewer, w.ns, "unaffected")
			g.Expect(textOf(all)).To(Equal(say), "the gateway's buffered blocks were published")
			ends := 0
			for _, ev := range all {
				if isEnd(ev) {
					ends++
				}
			}
			g.Expect(ends).To(Equal(1), "the watcher caught up with the run's status")
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})
})
