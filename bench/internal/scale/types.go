// Package scale is the member processes' side of the scale scenario
// (issue 27): a cell loaded with a million keys of 1 KB, and what that
// state costs. The parent (bench/bench's procs_scale.go) drives the
// phases; each member process answers the operations here for its own
// member, in-process, as a service embedding it would call it: batched
// loads, memory figures, paged lists, watches from an old revision,
// membership changes, and the growth to the keyspace cap with the
// quota's refusals. Package scale also holds the clients the parent
// keeps sessions and watches on (Hold).
package scale

import (
	"fmt"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// OpPrefix starts the name of every operation of the scale scenario.
const OpPrefix = "scale-"

// The operations.
const (
	OpLoad       = "scale-load"        // a Load: write keys in batches
	OpMem        = "scale-mem"         // a MemRequest: the process's memory and the member's status
	OpMemLimit   = "scale-memlimit"    // an int64: debug.SetMemoryLimit (what GOMEMLIMIT sets); < 0 lifts it
	OpList       = "scale-list"        // a ListRequest: a paged list, timed, with its memory peak
	OpPuts       = "scale-puts"        // a PutsRequest: single puts, returning their revisions
	OpWatchFrom  = "scale-watch-from"  // a WatchFromRequest: a watch from an old revision, timed
	OpGet        = "scale-get"         // a key: one linearizable get, timed
	OpStatus     = "scale-status"      // the member's cell.ScaleStatus
	OpAddLearner = "scale-add-learner" // a Membership: add a learner
	OpRemove     = "scale-remove"      // a Membership: remove a member
	OpQuotaCheck = "scale-quota-check" // a QuotaCheck: writes past the cap, deletes, a write after them
	OpTrickle    = "scale-trickle"     // a Trickle: start or stop a put every while in the background
	OpProfile    = "scale-profile"     // a file name: start a CPU profile into it; "" stops it
)

// Trickle starts (Every > 0) or stops (Every 0) a background writer that
// puts a small value under Key every Every: a live cell's steady writes.
// A member that has just installed a snapshot may report its applied
// index only once it applies an entry after it (etcd's does), so the
// catch-up of a new member is timed with writes going on.
type Trickle struct {
	Key   string        `json:"key"`
	Every time.Duration `json:"every"`
}

// Key returns key number i under prefix: fixed width, so the keys sort
// as their numbers do.
func Key(prefix string, i int) string { return fmt.Sprintf("%s%09d", prefix, i) }

// KeyLen is the length of Key's keys under prefix.
func KeyLen(prefix string) int { return len(prefix) + 9 }

// Load writes the keys From..To-1 under Prefix, Batch keys per
// transaction, by Writers writers, each value ValueSize bytes. With
// UntilQuota a refusal for the keyspace cap is no error: the writer
// writes that batch's keys one at a time until one is refused too, and
// every writer stops (the cell is then within one value of its cap);
// LoadResult.Refused says whether that happened before To.
type Load struct {
	Prefix     string `json:"prefix"`
	From       int    `json:"from"`
	To         int    `json:"to"`
	Batch      int    `json:"batch"`
	Writers    int    `json:"writers"`
	ValueSize  int    `json:"value_size"`
	UntilQuota bool   `json:"until_quota,omitempty"`
}

// LoadResult is what a Load wrote.
type LoadResult struct {
	// Keys and Bytes (keys and values) were written, in Seconds.
	Keys    int     `json:"keys"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Retries counts batches that failed for another reason than the
	// quota and were written again.
	Retries int `json:"retries"`
	// Refused says the quota refused a write; RefusedError is the first
	// refusal as the caller saw it, RefusedBatches how many batches were
	// refused.
	Refused        bool   `json:"refused,omitempty"`
	RefusedError   string `json:"refused_error,omitempty"`
	RefusedBatches int    `json:"refused_batches,omitempty"`
}

// MemRequest asks for the process's memory; GC first collects the
// garbage, so the heap figure is the live heap.
type MemRequest struct {
	GC bool `json:"gc"`
}

// Mem is a member process's memory at one instant, and its member's
// status.
type Mem struct {
	RSS     int64 `json:"rss"`
	PeakRSS int64 `json:"peak_rss"`
	RSSAnon int64 `json:"rss_anon"`
	RSSFile int64 `json:"rss_file"`
	// HeapObjects is the Go heap's bytes in objects before any GC the
	// request asked for; HeapLive the same after it (0 without GC).
	HeapObjects int64 `json:"heap_objects"`
	HeapLive    int64 `json:"heap_live"`
	// GoTotal is all the memory the Go runtime has mapped
	// (/memory/classes/total), GoReleased what of it was returned to the
	// OS.
	GoTotal    int64 `json:"go_total"`
	GoReleased int64 `json:"go_released"`
	// MemLimit is the runtime's memory limit (GOMEMLIMIT), math.MaxInt64
	// when none.
	MemLimit   int64            `json:"mem_limit"`
	Goroutines int              `json:"goroutines"`
	CPUSeconds float64          `json:"cpu_seconds"`
	Status     cell.ScaleStatus `json:"status"`
}

// ListRequest lists Keys keys under Prefix from its start, Page keys per
// read (coord: List with Limit and After; etcd: a range read with a
// limit), on this member.
type ListRequest struct {
	Prefix string `json:"prefix"`
	Keys   int    `json:"keys"`
	Page   int    `json:"page"`
}

// ListResult is what the list read and cost. The heap and RSS peaks are
// over their figures at its start (after a GC), sampled every 5 ms.
type ListResult struct {
	Keys      int     `json:"keys"`
	Pages     int     `json:"pages"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	HeapBase  int64   `json:"heap_base"`
	HeapPeak  int64   `json:"heap_peak"`
	RSSBase   int64   `json:"rss_base"`
	RSSPeak   int64   `json:"rss_peak"`
	PageP99Ms float64 `json:"page_p99_ms"`
}

// PutsRequest writes Count single puts of ValueSize bytes, keys From..
// under Prefix, by Workers writers.
type PutsRequest struct {
	Prefix    string `json:"prefix"`
	From      int    `json:"from"`
	Count     int    `json:"count"`
	Workers   int    `json:"workers"`
	ValueSize int    `json:"value_size"`
}

// PutsResult is the puts' revisions: every one in MinRev..MaxRev.
type PutsResult struct {
	MinRev  int64   `json:"min_rev"`
	MaxRev  int64   `json:"max_rev"`
	Seconds float64 `json:"seconds"`
}

// WatchFromRequest watches Prefix from the change after AfterRev and
// waits, at most Limit, for the change at UntilRev.
type WatchFromRequest struct {
	Prefix   string        `json:"prefix"`
	AfterRev int64         `json:"after_rev"`
	UntilRev int64         `json:"until_rev"`
	Limit    time.Duration `json:"limit"`
}

// WatchFromResult is what the watch received: Events changes, the first
// FirstSeconds after the watch was asked for, the one at UntilRev after
// Seconds (the watch's own setup included); the heap peak over its start.
type WatchFromResult struct {
	Events       int     `json:"events"`
	FirstSeconds float64 `json:"first_seconds"`
	Seconds      float64 `json:"seconds"`
	HeapBase     int64   `json:"heap_base"`
	HeapPeak     int64   `json:"heap_peak"`
	// Error is why the watch ended early, or why it did not finish.
	Error string `json:"error,omitempty"`
}

// GetResult is one linearizable get's time.
type GetResult struct {
	Seconds float64 `json:"seconds"`
}

// Membership names a member and its peer address.
type Membership struct {
	Name     string `json:"name"`
	PeerAddr string `json:"peer_addr"`
}

// QuotaCheck tests a cell at its cap: Writes single puts of ValueSize
// bytes under Prefix (new keys from WriteFrom); then Deletes deletes of
// the keys DeleteFrom.. under DeletePrefix, in transactions of 100; then
// one put after the deletes, and one linearizable get.
type QuotaCheck struct {
	Prefix       string `json:"prefix"`
	WriteFrom    int    `json:"write_from"`
	Writes       int    `json:"writes"`
	ValueSize    int    `json:"value_size"`
	DeletePrefix string `json:"delete_prefix"`
	DeleteFrom   int    `json:"delete_from"`
	Deletes      int    `json:"deletes"`
}

// QuotaResult is what the cell did at its cap.
type QuotaResult struct {
	// Writes were tried: WritesRefused refused by the quota, WritesOK
	// accepted, WritesOther failed otherwise (OtherError the first).
	Writes        int    `json:"writes"`
	WritesRefused int    `json:"writes_refused"`
	WritesOK      int    `json:"writes_ok"`
	WritesOther   int    `json:"writes_other"`
	OtherError    string `json:"other_error,omitempty"`
	RefusedError  string `json:"refused_error,omitempty"`
	// Deleted keys of Deletes, in DeleteSeconds; DeleteError the first
	// failure.
	Deletes       int     `json:"deletes"`
	Deleted       int     `json:"deleted"`
	DeleteSeconds float64 `json:"delete_seconds"`
	DeleteError   string  `json:"delete_error,omitempty"`
	// AfterDelete is the put after the deletes: "ok", "refused" (the
	// quota still refuses it) or another error.
	AfterDelete string `json:"after_delete"`
	// GetOK says a linearizable get at the cap succeeded.
	GetOK    bool   `json:"get_ok"`
	GetError string `json:"get_error,omitempty"`
}
