package wal

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A new segment is 32 MiB of zeros, written and synced before the first
// frame goes in (fill says why). Writing them when the tail fills would
// stall every commit of the member for that long, so a goroutine of the
// log's prepares the next segment ahead, under a name no scan reads
// (preparedName), and cutting renames it into place: the commit path
// then writes only the new segment's header. etcd's WAL does the same
// (file_pipeline.go). A cut that finds nothing prepared (the disk is
// slower than the log's growth, or preparing failed) fills inline and is
// counted (Stats.InlineCuts).

// preparedName is the prepared segment's file name: it does not end in
// segmentSuffix, so recovery never takes it for a segment, and Open
// removes one a crash left.
const preparedName = "next.prep"

// preparer owns the goroutine that prepares segments.
type preparer struct {
	ready chan struct{} // one token per prepared file waiting at preparedName
	want  chan struct{} // asks for the next one
	stop  chan struct{}
	wg    sync.WaitGroup
	// err is the last preparation's failure, for the log: the next cut
	// fills inline.
	mu  sync.Mutex
	err error
}

// startPreparing removes a prepared file an earlier run left and starts
// the goroutine, which prepares one file at once.
func (l *Log) startPreparing() {
	path := l.fs.PathJoin(l.dir, preparedName)
	if err := l.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("wal: remove an earlier prepared segment", "err", err)
	}
	p := &preparer{ready: make(chan struct{}, 1), want: make(chan struct{}, 1), stop: make(chan struct{})}
	l.prep = p
	p.want <- struct{}{}
	p.wg.Go(func() {
		for {
			select {
			case <-p.stop:
				return
			case <-p.want:
			}
			err := l.prepareFile(path)
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			if err != nil {
				l.logger.Warn("wal: prepare the next segment; the next cut fills it inline", "err", err)
				continue
			}
			p.ready <- struct{}{}
		}
	})
}

// prepareFile writes the zeros of a segment at path, syncing them as it
// goes (fill says why).
func (l *Log) prepareFile(path string) error {
	f, err := l.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	err = l.fill(f, true)
	if err == nil {
		err = f.Sync() // the size and extents, once
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// takePrepared moves the prepared file, if one is ready, to name and asks
// for the next. It reports whether it did.
func (l *Log) takePrepared(name string) (bool, error) {
	p := l.prep
	if p == nil {
		return false, nil
	}
	select {
	case <-p.ready:
	default:
		return false, nil
	}
	err := l.fs.Rename(l.fs.PathJoin(l.dir, preparedName), name)
	select {
	case p.want <- struct{}{}:
	default:
	}
	if err != nil {
		return false, fmt.Errorf("wal: rename the prepared segment to %s: %w", name, err)
	}
	return true, nil
}

// stopPreparing ends the goroutine and removes what it prepared.
func (l *Log) stopPreparing() {
	p := l.prep
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	l.prep = nil
	if err := l.fs.Remove(l.fs.PathJoin(l.dir, preparedName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.logger.Warn("wal: remove the prepared segment", "err", err)
	}
}

// Stats counts the log's segment cuts.
type Stats struct {
	// Cuts counts the segments started since Open; InlineCuts those whose
	// zeros had to be written on the append path, holding its commits,
	// because no prepared segment was ready.
	Cuts, InlineCuts uint64
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.stats
}
