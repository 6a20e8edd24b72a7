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

// Package netns makes sockets inside another network namespace, such as the
// real node's (hack/realnode): a socket stays in the namespace it was made
// in, so only its creation runs there, on an OS thread locked for it and
// never handed back to the Go scheduler.
package netns

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dial connects to addr (TCP) from inside the network namespace at nsPath
// (e.g. /proc/PID/ns/net).
func Dial(nsPath, addr string) (net.Conn, error) {
	var c net.Conn
	err := in(nsPath, func() (err error) {
		c, err = net.Dial("tcp", addr)
		return err
	})
	return c, err
}

// Listen listens on addr (TCP) inside the network namespace at nsPath; the
// listener is served from this process as any other.
func Listen(nsPath, addr string) (net.Listener, error) {
	var l net.Listener
	err := in(nsPath, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// in runs f on a fresh OS thread switched into the namespace; the thread
// ends with its goroutine (it is never unlocked).
func in(nsPath string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(nsPath)
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = ns.Close() }()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("setns %s: %w", nsPath, err)
			return
		}
		done <- f()
	}()
	return <-done
}
