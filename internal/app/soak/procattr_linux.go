package soak

import "syscall"

// childAttr kills the soak's processes with the driver, whatever ends it.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
