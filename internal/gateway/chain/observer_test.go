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
	"errors"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/agentrun-dev/agentrun/api/v1alpha1"
	"github.com/agentrun-dev/agentrun/internal/gateway/chain"
)

// The observer is told every hook's outcome with the entry's class: an
// error and a panic are failures, a veto is an answer.
func TestObserverSeesEveryHookOutcome(t *testing.T) {
	g := NewWithT(t)
	var mu sync.Mutex
	var got []chain.Observation
	obs := func(o chain.Observation) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, o)
	}
	mode := "ok"
	reg := chain.Registry{
		"auth": {Pre: func(context.Context, *chain.Call) error {
			switch mode {
			case "error":
				return errors.New("TokenReview: connection refused")
			case "veto":
				return chain.Veto("no token")
			case "panic":
				panic("boom")
			}
			return nil
		}},
		"audit": {Post: func(context.Context, *chain.Call, *chain.Outcome) error { return nil }},
	}
	c, _ := newChain(t, []v1alpha1.ResolvedInterceptor{
		pre("auth", v1alpha1.ClassSecurity, v1alpha1.PostureDeny, true),
		post("audit", v1alpha1.ClassObservability, v1alpha1.PostureAllow, false),
	}, reg, chain.WithObserver(obs))
	var r recorder
	for _, m := range []string{"ok", "error", "veto", "panic"} {
		mode = m
		_, _ = c.Run(context.Background(), toolCall(), r.dispatch("ok"))
	}
	g.Expect(got).To(Equal([]chain.Observation{
		{Kind: chain.KindTool, Interceptor: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Outcome: chain.OutcomeOK},
		{Kind: chain.KindTool, Interceptor: "audit", Class: v1alpha1.ClassObservability, Phase: v1alpha1.InterceptorPost, Outcome: chain.OutcomeOK},
		{Kind: chain.KindTool, Interceptor: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Outcome: chain.OutcomeError},
		{Kind: chain.KindTool, Interceptor: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Outcome: chain.OutcomeVeto},
		{Kind: chain.KindTool, Interceptor: "auth", Class: v1alpha1.ClassSecurity, Phase: v1alpha1.InterceptorPre, Outcome: chain.OutcomePanic},
	}))
	failed := []bool{}
	for _, o := range got {
		failed = append(failed, o.Failed())
	}
	g.Expect(failed).To(Equal([]bool{false, false, true, false, true}))
}
