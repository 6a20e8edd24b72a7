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
	"fmt"
	"slices"
	"strings"
)

// rowKey names a row across runs.
type rowKey struct {
	way, measure string
	rate         int
}

// byRow groups results by row, rows in the order first measured.
func byRow(results []result) ([]rowKey, map[rowKey][]result) {
	var keys []rowKey
	rows := map[rowKey][]result{}
	for _, x := range results {
		k := rowKey{x.Way, x.Name, x.Rate}
		if _, ok := rows[k]; !ok {
			keys = append(keys, k)
		}
		rows[k] = append(rows[k], x)
	}
	return keys, rows
}

// median is the median of f over rs.
func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, x := range rs {
		v = append(v, f(x))
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// each is f over rs, run by run.
func each(rs []result, f func(result) float64) string {
	parts := make([]string, 0, len(rs))
	for _, x := range rs {
		parts = append(parts, fmt.Sprintf("%.2f", f(x)))
	}
	return strings.Join(parts, ", ")
}

func (r report) writeModel(b *strings.Builder) {
	fmt.Fprintf(b, "## The model door: each door and each translation (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`)\n\n")
	fmt.Fprintf(b, "The gateway is its own process in front of an in-memory API server (the model path never waits on it: "+
		"counts are written coalesced, or with --durable-admission (%t here) before each dispatch, sharing a write "+
		"with concurrent admissions: against a real API server that adds one status write's latency); the fake upstream "+
		"(internal/upstream, which speaks the three APIs) answers after a fixed %.0f ms and runs in the driver. "+
		"A *way* is a door and the API of the model's provider: the door's own API (passed through) or another "+
		"(translated). Every request is timed from the driver at an open-loop rate, for %s each; *client-side added* is "+
		"the percentile via the gateway minus that of the same request sent straight to the upstream in the door's API, "+
		"the two sent in alternating blocks of %s at the same rate (so a load that comes and goes falls on both). *In-process* is the gateway's own added time, agentrun_gateway_added_seconds of the "+
		"door, read from the gateway process before and after the measurement: from the request's arrival to its "+
		"dispatch, plus from the provider's last byte to the answer's end (a stream is relayed as it comes, so for a "+
		"stream it is the part before dispatch and after the last event); its p50 and p99 are interpolated in "+
		"buckets of √2 (as histogram_quantile does), its share at most 1 ms is exact. Allocations are the gateway "+
		"process's (runtime.MemStats) per request. Each figure is the median of %d runs, each run with a gateway "+
		"process of its own; the p99 of each run follows. How to read them (on a shared 2-core machine the client-side "+
		"figure does not hold): [Reading the model door's figures](#reading-the-model-doors-figures).\n\n",
		r.DurableAdmission, r.UpstreamLatencyMs, r.Duration, pairBlock, r.Runs)
	fmt.Fprintf(b, "The machine has 2 cores, shared with other engineers' builds and tests during these runs: the load "+
		"average (1 minute) before and after each run is below. The driver and the upstream may run on CPUs %s, "+
		"the gateway on CPUs %s (Cpus_allowed_list).\n\n",
		r.DriverCPUs, r.GatewayCPUs)
	for _, ri := range r.RunInfo {
		fmt.Fprintf(b, "- run %d at %s: load average %s before, %s after\n", ri.Run, ri.Date, ri.Load, ri.LoadAfter)
	}
	fmt.Fprintf(b, "\n| way | measure | rate (req/s) | requests per run | **client-side added p50 / p99 (ms)** | "+
		"client-side added p99, each run (ms) | **in-process p50 / p99 (ms)** | in-process p99, each run (ms) | "+
		"in-process mean (ms) | in-process ≤ 1 ms | allocations / KB per request | GCs per 1,000 req | gateway CPU per 1,000 req (ms) | errors |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	keys, rows := byRow(r.Results)
	for _, k := range keys {
		rs := rows[k]
		errs := 0
		for _, x := range rs {
			errs += x.Errors
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.0f | **%.2f / %.2f** | %s | **%.2f / %.2f** | %s | %.3f | %.1f%% | %.0f / %.1f | %.1f | %.0f | %d |\n",
			k.way, k.measure, k.rate, median(rs, func(x result) float64 { return float64(x.Requests) }),
			median(rs, func(x result) float64 { return x.AddedP50 }), median(rs, func(x result) float64 { return x.AddedP99 }),
			each(rs, func(x result) float64 { return x.AddedP99 }),
			median(rs, func(x result) float64 { return x.InP50 }), median(rs, func(x result) float64 { return x.InP99 }),
			each(rs, func(x result) float64 { return x.InP99 }),
			median(rs, func(x result) float64 { return x.InMean }),
			100*median(rs, func(x result) float64 { return x.InUnder1ms }),
			median(rs, func(x result) float64 { return x.AllocsPerReq }), median(rs, func(x result) float64 { return x.KBPerReq }),
			median(rs, func(x result) float64 { return x.GCPer1k }),
			median(rs, func(x result) float64 { return x.CPUPer1k }), errs)
	}
	fmt.Fprintf(b, "\nDirect and via-gateway percentiles of each run are in the JSON beside this page.\n\n")
	fmt.Fprintf(b, "100 concurrent streams held open through the gateway: peak RSS %.1f MiB, %.0f ms of gateway CPU in all.\n\n",
		r.StreamsRSSMiB, r.StreamsCPUms)
	verdict := "**none served beyond the grant**"
	if r.RaceServed != r.RaceGrant || r.RaceDispatched != r.RaceGrant {
		verdict = fmt.Sprintf("**%d served against a grant of %d**", r.RaceServed, r.RaceGrant)
	}
	fmt.Fprintf(b, "Grant race: %d requests from %d concurrent clients against a grant of %d model requests: %d served, %d refused "+
		"with 429 `grant_exhausted`, %d other; the upstream received %d — %s.\n\n", r.RaceRequests, r.RaceClients, r.RaceGrant,
		r.RaceServed, r.RaceRefused, r.RaceOther, r.RaceDispatched, verdict)
	fmt.Fprintf(b, "Anchors: agentgateway reports p99 0.44 ms added at 3,000 QPS; LiteLLM p99 30.6 ms. "+
		"Target: added p99 under 1 ms at 1,000 requests/s.\n\n")
}
