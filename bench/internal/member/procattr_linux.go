package member

import "syscall"

// procAttr ties a child to the parent: the kernel kills it if the
// parent dies (even by SIGKILL, when no deferred kill runs), and its own
// process group keeps a terminal's Ctrl-C from reaching it: the parent
// handles SIGINT and stops its children in order.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
