//go:build !unix

package fence

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// lockMarksFile creates the lock file at path exclusively: where there is
// no flock, the file's existence is the lock, and closing removes it. A
// holder that dies leaves it behind, and it must then be removed by hand.
func lockMarksFile(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w (or a holder died: remove %s)", ErrMarksInUse, path)
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	return existenceLock{f}, nil
}

type existenceLock struct{ f *os.File }

func (l existenceLock) Close() error {
	return errors.Join(l.f.Close(), os.Remove(l.f.Name()))
}
