//go:build !linux

package member

import "syscall"

// procAttr puts a child in its own process group; without Pdeathsig the
// child still ends when the parent dies, because its stdin closes.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
