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
	"flag"
	"fmt"
	"io"
	"log"
	"net"

	"github.com/agentrun-dev/agentrun/hack/realnode/netns"
)

// proxyCmd listens on this machine and, for each connection, dials the
// target from inside the node's network namespace: the node has no route
// out and this machine none in, so this is the only path between them (the
// API server, for kubectl and the tests).
func proxyCmd(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	nsPath := fs.String("netns", "", "the node's network namespace, e.g. /proc/PID/ns/net")
	listen := fs.String("listen", "127.0.0.1:16443", "address to listen on, in this namespace")
	to := fs.String("to", "", "address to dial, in the node's namespace")
	_ = fs.Parse(args)
	if *nsPath == "" || *to == "" {
		return fmt.Errorf("-netns and -to are required")
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer func() { _ = c.Close() }()
			u, err := netns.Dial(*nsPath, *to)
			if err != nil {
				log.Printf("Dial failed to=%s err=%v", *to, err)
				return
			}
			defer func() { _ = u.Close() }()
			go func() { _, _ = io.Copy(u, c) }()
			_, _ = io.Copy(c, u)
		}()
	}
}
