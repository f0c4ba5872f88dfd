package storage

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMemDiskFailWrites: a disk that fails under a store (an I/O error,
// then a full disk) faults the store at its next append, and what the
// store acknowledged before is still there after a crash; a crash clone,
// and the same disk once healed, work again.
func TestMemDiskFailWrites(t *testing.T) {
	t.Parallel()
	for _, cause := range []error{syscall.EIO, &os.PathError{Op: "write", Path: "disk", Err: syscall.ENOSPC}} {
		errno := cause
		if pe, ok := cause.(*os.PathError); ok {
			errno = pe.Err
		}
		disk := NewMemDisk()
		s, err := Open(Options{Disk: disk})
		require.NoError(t, err)
		require.NoError(t, appendEntries(t, s, 20, 64, 1, 1))
		want, _ := s.RaftLog().LastIndex()

		disk.FailWrites(cause)
		err = appendEntries(t, s, 5, 64, 1, 1)
		require.ErrorIs(t, err, ErrFault)
		require.ErrorIs(t, err, errno)
		_ = s.Close()

		crashed := disk.Crash(nil)
		s2, err := Open(Options{Disk: crashed})
		require.NoError(t, err)
		last, _ := s2.RaftLog().LastIndex()
		require.Equal(t, want, last, "acknowledged entries lost, or unacknowledged ones kept")
		require.NoError(t, appendEntries(t, s2, 5, 64, 1, 1), "a crash clone starts healthy")
		require.NoError(t, s2.Close())

		disk.FailWrites(nil)
		s3, err := Open(Options{Disk: disk})
		require.NoError(t, err)
		require.NoError(t, appendEntries(t, s3, 5, 64, 1, 1), "the healed disk works")
		require.NoError(t, s3.Close())
	}
}
