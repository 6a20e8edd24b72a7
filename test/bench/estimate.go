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
	"slices"
	"time"
)

// Rates the estimate assumes (docs/benchmarks.md, a fresh 2-core machine,
// before issue 14's operator changes): runs/s in a burst, seconds per serial
// run, the highest stepped rate kept up with.
var estimateRates = map[string]struct {
	burstPerS, serialS float64
	sustained          int
}{
	sysJob:      {burstPerS: 75, serialS: 1.05, sustained: 80},
	sysAgentrun: {burstPerS: 18, serialS: 0.15, sustained: 10},
}

// planeOverhead is one fresh plane: start, peer start, warm-up, quiet wait, stop.
const planeOverhead = 15 * time.Second

// expectedDuration estimates the whole benchmark's wall time, assuming every
// live step is sustained (an upper bound for that workload).
func expectedDuration(wls []workload, systems []string, ceiling bool, trials, heavyTrials int, o *options) time.Duration {
	var total time.Duration
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for trial := 1; trial <= trials; trial++ {
		if ceiling {
			total += planeOverhead + 3*o.ceilingDuration + 5*time.Second
		}
		for _, wl := range wls {
			if wl.heavy() && trial > heavyTrials {
				continue
			}
			if wl.Kind == "live" {
				set := wl.Live
				for _, m := range set.Sizes {
					ramp := secs(float64(m) / float64(set.Rate))
					total += planeOverhead + 2*ramp + set.Window + 10*time.Second
				}
				continue
			}
			for _, sys := range systems {
				if wl.Webhooks && sys != sysAgentrun {
					continue
				}
				r, ok := estimateRates[sys]
				if !ok {
					continue
				}
				total += planeOverhead
				switch wl.Kind {
				case "serial":
					total += secs(float64(wl.N) * r.serialS)
				case "burst":
					total += secs(float64(wl.N)/r.burstPerS) + 2*time.Second
				case "stepped":
					steps := slices.IndexFunc(wl.Rates, func(rate int) bool { return rate > r.sustained })
					if steps < 0 {
						steps = len(wl.Rates) - 1
					}
					total += time.Duration(steps+1)*wl.Window + 10*time.Second
				}
			}
		}
	}
	return total
}
