package cell

import (
	"context"
	"fmt"
)

// Scaler is what the scale scenario needs of a member beyond Member:
// batched loads, paged lists, watches from a revision, the quota's
// refusal, and membership changes. Every method is safe for concurrent
// use.
type Scaler interface {
	// PutBatch writes every key with value in one transaction.
	PutBatch(ctx context.Context, keys []string, value []byte) error
	// DeleteBatch deletes every key in one transaction.
	DeleteBatch(ctx context.Context, keys []string) error
	// PutRev writes value under key and returns the revision of the
	// write.
	PutRev(ctx context.Context, key string, value []byte) (int64, error)
	// ListPage reads, linearizable, at most limit keys under prefix that
	// sort after after ("" = from the prefix's first key): how many, the
	// last one, and their bytes (keys and values).
	ListPage(ctx context.Context, prefix, after string, limit int) (n int, last string, bytes int64, err error)
	// WatchFrom watches prefix from the change after revision rev,
	// calling fn with each change's revision from one goroutine. It
	// returns once the member has taken the watch on, with a function
	// that says why the watch ended (nil while it runs); the watch ends
	// with ctx.
	WatchFrom(ctx context.Context, prefix string, rev int64, fn func(rev int64)) (ended func() error, err error)
	// QuotaRefused reports whether err is the refusal of a write past the
	// keyspace cap (coord ErrQuotaExceeded, etcd NOSPACE).
	QuotaRefused(err error) bool
	// ScaleStatus returns the member's figures now.
	ScaleStatus(ctx context.Context) (ScaleStatus, error)
	// AddLearner adds a non-voting member called name (a member name of
	// the side's cell, e.g. index 3's) with its peer address.
	AddLearner(ctx context.Context, name, peerAddr string) error
	// RemoveMember removes the member called name, at peerAddr, from the
	// cell.
	RemoveMember(ctx context.Context, name, peerAddr string) error
}

// MemberName is the name of member index of side's cells ("coord-m3"),
// the same on both sides.
func MemberName(side string, index int) string { return fmt.Sprintf("%s-m%d", side, index) }

// ScaleStatus is a member's figures in the scale scenario.
type ScaleStatus struct {
	// Applied is the member's applied log index, Commit the highest it
	// knows committed.
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	// Revision is the cell revision of its applied state.
	Revision int64 `json:"revision"`
	// Leader says whether it leads.
	Leader bool `json:"leader"`
	// KeyspaceBytes is coord's live keys and values as its quota counts
	// them (-1 where the side has no such figure).
	KeyspaceBytes int64 `json:"keyspace_bytes"`
	// DBBytes is etcd's database file, DBInUseBytes its part in use: what
	// its quota bounds (-1 for coord).
	DBBytes      int64 `json:"db_bytes"`
	DBInUseBytes int64 `json:"db_in_use_bytes"`
	// Sessions is the live sessions (coord) or leases (etcd) in the
	// cell, -1 when unknown.
	Sessions int64 `json:"sessions"`
}
