//go:build !linux

package main

import "syscall"

// endWithParent: only Linux can tie a child's end to its parent's; measure
// reads /proc and runs on Linux.
func endWithParent() *syscall.SysProcAttr { return nil }
