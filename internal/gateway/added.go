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
	"context"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The gateway's own added time (agentrun_gateway_added_seconds): what a
// model request spends in this process and not waiting on its provider,
// from the request's arrival at the door (before its token is checked) to
// its dispatch, plus from the provider's last byte to the handler's end
// (the answer written). A streamed answer is relayed while the provider
// sends it, so that part of a stream is the provider's time. Observed per
// door: chat, responses, messages.

// addedBuckets resolve the added time from 31.25 µs to 2 s in steps of √2,
// one bound at 1 ms, so the share of requests under a millisecond and a p99
// under it can be read from the histogram.
var addedBuckets = prometheus.ExponentialBuckets(1e-3/32, math.Sqrt2, 33)

// arrivalKey is the context key of a request's arrival.
type arrivalKey struct{}

// arrival is when a request reached one of the gateway's routes, and which.
type arrival struct {
	at    time.Time
	route string
}

// withArrival records the request's arrival at route in its context.
func withArrival(r *http.Request, at time.Time, route string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), arrivalKey{}, &arrival{at: at, route: route}))
}

// arrivalOf is the request's arrival; a request that came in no other way
// (a test calling a handler directly) arrived at fallback.
func arrivalOf(ctx context.Context, fallback time.Time) arrival {
	if a, ok := ctx.Value(arrivalKey{}).(*arrival); ok {
		return *a
	}
	return arrival{at: fallback}
}

// observeAdded records what a model request added: its time since it
// arrived, less its upstream time.
func (g *Gateway) observeAdded(a arrival, upstream time.Duration) {
	g.metrics.addedSeconds.WithLabelValues(a.route).Observe(max(g.clock.Since(a.at)-upstream, 0).Seconds())
}
