package member

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

// fakeMember is an in-memory cell.Member that counts its puts.
type fakeMember struct {
	puts   atomic.Int64
	closed atomic.Bool
}

func (f *fakeMember) Side() string { return "fake" }
func (f *fakeMember) Put(context.Context, string, []byte) error {
	f.puts.Add(1)
	return nil
}
func (f *fakeMember) Get(context.Context, string, bool) error { return nil }
func (f *fakeMember) NewSession(context.Context, time.Duration) (cell.Session, error) {
	return nil, nil
}
func (f *fakeMember) Watch(context.Context, string, func(string)) error { return nil }
func (f *fakeMember) Close() error {
	f.closed.Store(true)
	return nil
}
