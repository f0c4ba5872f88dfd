package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage/wal"
)

// ErrLostState is returned by Open for a directory whose Raft state is
// older than what this member is known to have made durable: its vote,
// its term, or log entries it synced (and so may have acknowledged).
// Such a member could vote twice in a term or count toward a commit with
// entries it no longer has (invariant 12 of ARCHITECTURE.md), so it must not
// start: remove it from the cell and add it back with an empty directory.
// It is coord.ErrStateLost itself, the error raftnode reports when the
// other members find the same loss, so one errors.Is check covers both.
var ErrLostState = errs.StateLost

// The Raft log (package wal) recovers up to its first bad frame at the
// tail and drops the rest without a word, as it must for a tail that a
// crash left half written. Damage to synced frames there looks the same,
// so the store keeps its own account of what it synced, in a small file
// beside Pebble's: the term and vote (written and synced after the hard state
// that holds them, before raft may send the vote), and the last synced
// log index (rewritten after each synced append without a sync of its
// own, so it may lag after a power cut but never runs ahead). Open
// refuses a log that ends before that account.
//
// The file has two slots, written in turn, each with a sequence number
// and a checksum, so a write torn by a power cut spoils one slot only.
const (
	marksFile     = "COORD-DURABLE"
	marksVersion  = 1
	marksSlotSize = 512 // one sector per slot
	marksRecLen   = 37  // version, seq, term, vote, durable, crc32c
)

// marksKey is a local record in Pebble saying the marks file exists, so
// that a directory which lost it is refused rather than trusted.
var marksKey = []byte{prefixLocal, 'D'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// markRecord is what the marks file says.
type markRecord struct {
	term, vote uint64
	durable    uint64 // last log index known synced
}

// marks is the open marks file.
type marks struct {
	mu   sync.Mutex
	file vfs.File
	seq  uint64
	cur  markRecord
	buf  [marksRecLen]byte
}

func encodeMark(b []byte, seq uint64, r markRecord) {
	b[0] = marksVersion
	binary.BigEndian.PutUint64(b[1:], seq)
	binary.BigEndian.PutUint64(b[9:], r.term)
	binary.BigEndian.PutUint64(b[17:], r.vote)
	binary.BigEndian.PutUint64(b[25:], r.durable)
	binary.BigEndian.PutUint32(b[33:], crc32.Checksum(b[:33], crcTable))
}

func decodeMark(b []byte) (seq uint64, r markRecord, ok bool) {
	if len(b) < marksRecLen || b[0] != marksVersion ||
		binary.BigEndian.Uint32(b[33:]) != crc32.Checksum(b[:33], crcTable) {
		return 0, markRecord{}, false
	}
	return binary.BigEndian.Uint64(b[1:]), markRecord{
		term:    binary.BigEndian.Uint64(b[9:]),
		vote:    binary.BigEndian.Uint64(b[17:]),
		durable: binary.BigEndian.Uint64(b[25:]),
	}, true
}

// readMarks reads the newest valid slot of the marks file at path.
// found is false if the file does not exist.
func readMarks(fs vfs.FS, path string) (seq uint64, r markRecord, found bool, err error) {
	f, err := fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, markRecord{}, false, nil
	}
	if err != nil {
		return 0, markRecord{}, false, fmt.Errorf("storage: open %s: %w", path, err)
	}
	defer f.Close()
	var buf [2 * marksSlotSize]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, markRecord{}, false, fmt.Errorf("storage: read %s: %w", path, err)
	}
	valid := false
	for slot := 0; slot*marksSlotSize < n; slot++ {
		s, rec, ok := decodeMark(buf[slot*marksSlotSize : min(n, (slot+1)*marksSlotSize)])
		if ok && (!valid || s > seq) {
			seq, r, valid = s, rec, true
		}
	}
	if !valid {
		return 0, markRecord{}, true, fmt.Errorf("%w: %s has no readable record", ErrLostState, path)
	}
	return seq, r, true, nil
}

// openMarks opens the marks file in dir and checks the Raft state
// the log recovered (term and vote of the hard state, last log index)
// against it. A directory without one (new, or from before the file
// existed) gets one, started from the recovered state.
func openMarks(db *pebble.DB, fs vfs.FS, dir string, term, vote, last uint64) (*marks, error) {
	path := fs.PathJoin(dir, marksFile)
	seq, rec, found, recorded, err := checkMarks(db, fs, path, term, vote, last)
	if err != nil {
		return nil, err
	}
	if !found {
		rec = markRecord{term: term, vote: vote, durable: last}
	}
	file, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	m := &marks{file: file, seq: seq, cur: rec}
	if !found {
		if err := m.writeLocked(rec, true); err != nil {
			file.Close()
			return nil, err
		}
		if err := syncDir(fs, dir); err != nil {
			file.Close()
			return nil, err
		}
	}
	if !recorded {
		if err := db.Set(marksKey, nil, pebble.Sync); err != nil {
			file.Close()
			return nil, fmt.Errorf("storage: write marks record: %w", err)
		}
	}
	return m, nil
}

// checkMarks reads the marks file at path and checks the recovered Raft
// state against it, writing nothing. found says the file exists;
// recorded that db (nil = none yet) says it should.
func checkMarks(db pebble.Reader, fs vfs.FS, path string, term, vote, last uint64) (seq uint64, rec markRecord, found, recorded bool, err error) {
	seq, rec, found, err = readMarks(fs, path)
	if err != nil {
		return 0, markRecord{}, false, false, err
	}
	if db != nil {
		_, closer, err := db.Get(marksKey)
		recorded = err == nil
		if recorded {
			closer.Close()
		} else if !errors.Is(err, pebble.ErrNotFound) {
			return 0, markRecord{}, false, false, fmt.Errorf("storage: read marks record: %w", err)
		}
	}
	switch {
	case found:
		if err := rec.check(term, vote, last); err != nil {
			return 0, markRecord{}, false, false, err
		}
	case recorded:
		return 0, markRecord{}, false, false, fmt.Errorf("%w: %s is missing", ErrLostState, path)
	}
	return seq, rec, found, recorded, nil
}

// inspectDir refuses, before anything is written, a data directory that
// Open would refuse: it reads Pebble (opened read-only), recovers the
// Raft log without repairing it (wal.Inspect), works out where the log
// would stand after reconcile, and checks that against the marks file.
// Open's own checks come later, after Pebble's read-write open (which
// flushes and writes a new manifest, WAL and OPTIONS file), the log's
// repairs and reconcile's writes: without this, a refused member's
// directory would no longer be the evidence of what it lost.
//
// It returns the recovered log for Open to go on from, or nil where
// Open must read it itself (a format-1 store, whose log is still in
// Pebble).
func inspectDir(fs vfs.FS, dir string, logger pebble.Logger, walOpts wal.Options) (*wal.Recovered, error) {
	var (
		db               *pebble.DB
		applied, appTerm uint64
		recorded         bool
	)
	desc, err := pebble.Peek(dir, fs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // a new store: nothing to refuse
	}
	if err != nil {
		return nil, fmt.Errorf("storage: read %s: %w", dir, err)
	}
	if desc.Exists {
		db, err = pebble.Open(dir, &pebble.Options{FS: fs, Logger: logger, ReadOnly: true, CacheSize: 1 << 20})
		if err != nil {
			if errors.Is(err, pebble.ErrCorruption) {
				return nil, fmt.Errorf("%w: open %s: %w", ErrLostState, dir, err)
			}
			return nil, fmt.Errorf("storage: open %s: %w", dir, err)
		}
		defer db.Close()
		version, found, err := readFormat(db)
		switch {
		case err != nil:
			return nil, err
		case found && version == 1:
			return nil, nil // upgradeV1 rewrites the log
		case found && version != FormatVersion:
			return nil, fmt.Errorf("%w: found %d, want %d", ErrFormat, version, FormatVersion)
		}
		m, _, err := readMeta(db)
		if err != nil {
			return nil, err
		}
		applied, appTerm = m.index, m.term
		if _, closer, err := db.Get(marksKey); err == nil {
			closer.Close()
			recorded = true
		}
		if recorded && found {
			if _, err := fs.Stat(walOpts.Dir); err != nil {
				return nil, fmt.Errorf("%w: raft log %s: %w", ErrLostState, walOpts.Dir, err)
			}
		}
	}
	rec, err := wal.Inspect(walOpts)
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, fmt.Errorf("%w: %w", ErrLostState, err)
		}
		return nil, fmt.Errorf("storage: open raft log: %w", err)
	}
	trunc, _ := rec.Truncated()
	hs, last := rec.HardState(), rec.LastIndex()
	p, err := planReconcile(hs, trunc, last, rec.Term, applied, appTerm)
	if err != nil {
		return nil, err
	}
	term, vote, last := p.after(hs, last, applied)
	var r pebble.Reader
	if db != nil {
		r = db
	}
	if _, _, _, _, err := checkMarks(r, fs, fs.PathJoin(dir, marksFile), term, vote, last); err != nil {
		return nil, err
	}
	return rec, nil
}

// check compares the recovered state with the record.
func (r markRecord) check(term, vote, last uint64) error {
	switch {
	case term < r.term:
		return fmt.Errorf("%w: hard state is at term %d, but term %d was made durable", ErrLostState, term, r.term)
	case term == r.term && r.vote != 0 && vote != r.vote:
		return fmt.Errorf("%w: vote in term %d is %d, but %d was made durable", ErrLostState, term, vote, r.vote)
	case last < r.durable:
		return fmt.Errorf("%w: log ends at index %d, but entries up to %d were synced", ErrLostState, last, r.durable)
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("storage: open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync %s: %w", dir, err)
	}
	return nil
}

// lowerTo makes the account say no more than last entries are durable,
// synced, before the log is cut back to last (a conflicting tail
// replaced, a snapshot installed): a crash between the two then finds
// the account no higher than the log.
func (m *marks) lowerTo(last uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if last >= m.cur.durable {
		return nil
	}
	r := m.cur
	r.durable = last
	return m.writeLocked(r, true)
}

// advance records state that is durable now. A new term or vote is
// synced (it is rare, and raft may send the vote once this returns), as
// is everything when syncAll is set; a new last index alone is only
// written.
func (m *marks) advance(term, vote, last uint64, syncAll bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.cur
	sync := syncAll
	if term > r.term || (term == r.term && vote != r.vote && vote != 0) {
		r.term, r.vote, sync = term, vote, true
	}
	r.durable = last
	if r == m.cur && !syncAll {
		return nil
	}
	return m.writeLocked(r, sync)
}

func (m *marks) writeLocked(r markRecord, sync bool) error {
	seq := m.seq + 1
	encodeMark(m.buf[:], seq, r)
	if _, err := m.file.WriteAt(m.buf[:], int64(seq%2)*marksSlotSize); err != nil {
		return fmt.Errorf("storage: write marks: %w", err)
	}
	if sync {
		if err := m.file.Sync(); err != nil {
			return fmt.Errorf("storage: sync marks: %w", err)
		}
	}
	m.seq, m.cur = seq, r
	return nil
}

func (m *marks) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.file.Close()
}
