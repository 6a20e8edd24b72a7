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
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1 "github.com/agentrun-dev/agentrun/api/v1alpha1"
)

// chromium is Debian's Chromium, found (or installed) by hack/chromium.sh.
func chromium() string {
	GinkgoHelper()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "chromium.sh")).Output()
	Expect(err).NotTo(HaveOccurred(), "hack/chromium.sh finds or installs the browser of this story")
	return strings.TrimSpace(string(out))
}

// tab opens a headless Chromium tab for the rest of the spec.
func tab() context.Context {
	GinkgoHelper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium()), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU)
	bounded, cancelBound := context.WithTimeout(ctx, 2*time.Minute)
	alloc, cancelAlloc := chromedp.NewExecAllocator(bounded, opts...)
	b, cancelTab := chromedp.NewContext(alloc)
	DeferCleanup(func() { cancelTab(); cancelAlloc(); cancelBound() })
	return b
}

// waitPage polls a JavaScript predicate of the page until it holds.
func waitPage(b context.Context, what, predicate string) {
	GinkgoHelper()
	By("the page shows " + what)
	poll := chromedp.Poll[bool]("!!("+predicate+")",
		chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(time.Minute))
	_, err := chromedp.Run(b, poll)
	if err != nil {
		text, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.body.innerText`))
		Fail("waiting for " + what + ": " + err.Error() + "\npage:\n" + text)
	}
}

// pageBlocks counts the page's elements per block id, and reads the text
// blocks' text.
const pageBlocks = `(() => {
  const blocks = {}, texts = [];
  for (const e of document.querySelectorAll('[data-block]')) {
    blocks[e.dataset.block] = (blocks[e.dataset.block] || 0) + 1;
    if (e.dataset.block.includes('/text-')) texts.push(e.querySelector('.body')?.textContent || '');
  }
  return {blocks, texts, phase: document.querySelector('#run-header').dataset.phase};
})()`

type pageView struct {
	Blocks map[string]int `json:"blocks"`
	Texts  []string       `json:"texts"`
	Phase  string         `json:"phase"`
}

var _ = Describe("The run stream's web page", Ordered, Label("stream", "browser"), func() {
	It("shows a run live in a real browser; a reload mid-run duplicates no block", func() {
		w := newWorld(nil)
		viewer, err := st.ViewerToken(ctx, w.ns, "viewer")
		Expect(err).NotTo(HaveOccurred())
		say := strings.Repeat("Each block streams once. ", 24) // 38 chunks of 16 bytes, ~6 s: still streaming when read on a busy machine
		w.streamedRun("watched", streamedTurn("Reading the goal first.", say, 150*time.Millisecond))

		b := tab()
		By("opening the run's page with a viewer's token")
		Expect(chromedp.Do(b, chromedp.Navigate(st.StreamURL+"/?namespace="+w.ns+"&run=watched#token="+viewer))).To(Succeed())
		waitPage(b, "part of the text, streaming", `(() => {
  const e = [...document.querySelectorAll('[data-block*="/text-"] .body')][0];
  return e && e.textContent.length > 0 && !document.querySelector('#timeline[data-finished="true"]');
})()`)
		mid, err := chromedp.Run(b, chromedp.Evaluate[pageView](pageBlocks))
		Expect(err).NotTo(HaveOccurred())
		Expect(mid.Texts).To(HaveLen(1))
		Expect(len(mid.Texts[0])).To(BeNumerically("<", len(say)), "reloaded while the text streams")

		By("reloading the page mid-run")
		Expect(chromedp.Do(b, chromedp.Reload())).To(Succeed())
		waitPage(b, "the run's end", `document.querySelector('#timeline[data-finished="true"]')`)

		end, err := chromedp.Run(b, chromedp.Evaluate[pageView](pageBlocks))
		Expect(err).NotTo(HaveOccurred())
		for id, n := range end.Blocks {
			Expect(n).To(Equal(1), "block %s is shown %d times", id, n)
		}
		Expect(end.Texts).To(Equal([]string{say}), "the text block, whole and once")
		Expect(end.Phase).To(Equal(string(v1.PhaseTerminated)))
		w.terminated("watched", v1.ReasonCompleted, v1.SettlementComplete)
	})
})
