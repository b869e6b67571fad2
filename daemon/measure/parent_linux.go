package main

import "syscall"

// endWithParent has the kernel send SIGTERM to a child when measure ends,
// however it ends (kill -9, or `go run`'s parent killed): a measurement
// never leaves a daemon and an engine model running.
func endWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
