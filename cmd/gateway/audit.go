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
	"errors"
	"os"
	"sync"
)

// appendFile is the audit log: each line is appended to the file opened
// anew, so a rotated or replaced file is picked up at once, and a file that
// cannot be written fails the audit interceptor (which fails open and
// resends its buffered lines once the file can be written again).
type appendFile struct {
	mu   sync.Mutex
	path string
}

func (a *appendFile) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.OpenFile(a.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, werr := f.Write(p)
	return n, errors.Join(werr, f.Close())
}
