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

package node

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// ChildProcAttr puts a child in its own process group (so the whole group can
// be signalled) and has the kernel SIGKILL it when this process dies, so a
// crashed or killed parent never leaves children behind.
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// SetParentDeathSignal asks the kernel to SIGKILL this process when its parent
// dies (it survives execve); used by the exec shim of etcd and kube-apiserver.
func SetParentDeathSignal() error {
	return unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
}
