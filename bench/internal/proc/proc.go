// Package proc reads what a process used: CPU time and resident memory,
// from getrusage(2) and /proc/<pid>/status (Linux).
package proc

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU returns the CPU time (user + system) this process has used.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return cpuOf(&ru)
}

func cpuOf(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Usage is what a finished child process used, from its rusage.
type Usage struct {
	CPU     time.Duration // user + system
	PeakRSS int64         // bytes (ru_maxrss)
}

// ChildUsage returns the usage of a child that has exited. It is zero
// when the platform gives no rusage.
func ChildUsage(ps *os.ProcessState) Usage {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return Usage{}
	}
	// Linux reports ru_maxrss in KiB.
	return Usage{CPU: cpuOf(ru), PeakRSS: ru.Maxrss * 1024}
}

// Memory is this process's resident memory.
type Memory struct {
	RSS     int64 // VmRSS, bytes
	PeakRSS int64 // VmHWM, bytes: the highest RSS so far
	// RSSAnon and RSSFile split RSS: anonymous memory (the Go heap, its
	// stacks) and pages of mapped files (etcd's bbolt database is one).
	RSSAnon int64
	RSSFile int64
}

// ReadMemory reads this process's VmRSS, VmHWM, RssAnon and RssFile from
// /proc/self/status.
func ReadMemory() (Memory, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.PeakRSS
		case "RssAnon":
			dst = &m.RSSAnon
		case "RssFile":
			dst = &m.RSSFile
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc/self/status %s: %w", name, err)
		}
		*dst = kb * 1024
	}
	return m, sc.Err()
}
