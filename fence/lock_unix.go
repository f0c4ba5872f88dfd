//go:build unix

package fence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// lockMarksFile opens (creating it if need be) and locks the lock file at
// path for the caller alone. flock locks belong to the open file, so a
// second open in the same process conflicts just as another process does,
// and the kernel drops the lock when its holder dies.
func lockMarksFile(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrMarksInUse
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}
