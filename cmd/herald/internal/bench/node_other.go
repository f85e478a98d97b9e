//go:build !linux

package bench

import "syscall"

// childSysProcAttr has nothing to add off Linux.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
