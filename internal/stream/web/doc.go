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

// Package web serves the run stream's web page: a namespace's runs (polled
// from ListPathPattern every 2 s) and one run's live timeline, read from the
// SSE events path of package sse with fetch() so that a bearer token can be
// sent as a header.
//
//	GET /                 index.html (also /index.html, /app.js, /style.css)
//	GET /apis/stream.agentrun.dev/v1/namespaces/{namespace}/researchruns
//	                      {"items":[RunSummary...]}
//
// The page is static files embedded in the binary: no framework, no build
// step, nothing fetched from elsewhere (its Content-Security-Policy allows
// only its own origin). It never uses cookies: it reads a token from the URL
// fragment #token=..., keeps it in sessionStorage and sends it as
// Authorization: Bearer on every request.
//
// The page exposes its state to tests only as DOM attributes: each timeline
// block has data-block (its messageId or toolCallId), the run header
// data-phase, the timeline data-last-seq (the last applied seq) and, once the
// run has ended, data-finished="true".
package web
