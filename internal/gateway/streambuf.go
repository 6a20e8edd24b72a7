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
	"bufio"
	"io"
	"sync"
)

// streamBufSize is the read buffer of a provider's stream: a line longer
// than it is read in fragments (readLine), up to the response bound.
const streamBufSize = 64 << 10

// streamReaders keeps the read buffers of streams that ended, for the next.
// A buffer of its own per stream was 64 KiB of garbage per streamed model
// request, two thirds of what a streamed request allocated (and more than
// that translated: a Messages stream read for a chat client is read twice);
// at 1,000 streams a second that alone ran the garbage collector several
// times a second (BenchmarkModelDoor, docs/benchmarks-gateway.md).
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, streamBufSize) }}

// streamReader reads body through a pooled buffer; give it back with
// releaseStreamReader once the stream is read. What readLine returns is a
// copy, never a slice of the buffer, so nothing read outlives it.
func streamReader(body io.Reader) *bufio.Reader {
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(body)
	return br
}

// releaseStreamReader gives br's buffer back, holding no reference to the
// stream it read.
func releaseStreamReader(br *bufio.Reader) {
	br.Reset(nil)
	streamReaders.Put(br)
}
