// Package member runs each member of a cell in its own OS process, the
// shape a user's service has: the parent starts one child per member
// (the bench program re-executed), and the load runs inside the
// children, calling their own member in-process.
//
// Parent and child speak JSON lines over the child's stdin and stdout:
// the parent writes the member's Spec, the child answers with a first
// Response once its member runs and the cell has committed a write; then
// each Request gets one Response, in order. Every Response carries the
// child's CPU time and memory, so the parent never reads another
// process's /proc. The child ends when its stdin closes: the parent
// closes it to stop a child, and the kernel closes it if the parent dies.
package member

import (
	"encoding/json"
	"errors"
	"github.com/coordcell/coord/bench/internal/cell"
)

// MaxLine bounds one protocol line. The peer is our own child or parent,
// but a line is still read into memory, so it is bounded like any input.
const MaxLine = 4 << 20

// ErrTooLong is returned for a protocol line longer than MaxLine.
var ErrTooLong = errors.New("member: protocol line too long")

// Spec is what a child needs to open its member.
type Spec struct {
	// Side is "coord" or "etcd".
	Side string `json:"side"`
	// Member places the member in its cell.
	Member cell.MemberSpec `json:"member"`
}

// Request asks a child to do Op with the handler's Body.
type Request struct {
	Op   string          `json:"op"`
	Body json.RawMessage `json:"body,omitempty"`
}

// Response is a child's answer to a Request (or to its Spec).
type Response struct {
	// Body is the handler's result; Error is set instead when it failed.
	Body  json.RawMessage `json:"body,omitempty"`
	Error string          `json:"error,omitempty"`
	// Usage is the child's CPU time and memory as it answered.
	Usage Usage `json:"usage"`
}

// ReadyInfo is the body of a child's first Response: how long its member
// took to open (a restarted member reads its state back from disk) and
// then to commit a write through it (0 for a joining member, which is not
// asked to).
type ReadyInfo struct {
	OpenSeconds  float64 `json:"open_seconds"`
	AwaitSeconds float64 `json:"await_seconds"`
}

// Usage is a process's resources so far.
type Usage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	RSS        int64   `json:"rss"`      // bytes, VmRSS
	PeakRSS    int64   `json:"peak_rss"` // bytes, VmHWM
}
