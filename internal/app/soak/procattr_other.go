//go:build !linux

package soak

import "syscall"

// childAttr: without Pdeathsig, a killed driver leaves its processes
// (the soak's own shutdown stops them).
func childAttr() *syscall.SysProcAttr { return nil }
