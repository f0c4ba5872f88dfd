// Package storage keeps a member's durable state in one directory: the
// Raft log (RaftLog, a raft.Storage) in a write-ahead log of its own
// (package wal, under raftlog/), and the replicated state machine
// (StateMachine: keys, sessions, the change history that watches read)
// in a Pebble database.
//
// The Raft loop syncs the log once per Ready, one fdatasync of one
// frame. The state machine's applies are not synced one by one: the
// applied index is written in the same batch as the change it applies,
// so a restart replays exactly the entries not yet applied, never one
// twice, from the log, which is compacted only after the state machine
// is synced past what it drops. A crash may still leave the state
// machine ahead of the log (an entry applies once a quorum holds it,
// perhaps before this member's own append is durable); Open then makes
// the log start after the applied entry (RaftLog.reconcile).
//
// The state machine also keeps its live state in memory: every key with
// its value, every session, and which keys each session owns. Reads and
// the transactions Apply runs are served from there; Pebble is the durable
// copy it is rebuilt from when the store opens or installs a snapshot.
// Memory therefore grows with the key space, which Options.QuotaBytes
// bounds, while Pebble's own caches stay small.
//
// A storage fault (corruption, a full disk, repeated I/O errors) stops
// the store, never the process: it is reported once (Options.OnFault,
// ErrFault), nothing more is written, and every later call returns it
// (faults.go). A directory that holds less than this member made durable
// is refused at Open with ErrLostState (marks.go).
package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/storage/wal"
	pb "go.etcd.io/raft/v3/raftpb"
)

// defaultEntryCacheBytes is Options.EntryCacheBytes' default. Raft reads
// entries back soon after appending them (to apply them, and to send
// them to followers that are not far behind); 1 MiB holds thousands of
// small commands, a fraction of a second at full load, which is more than
// the apply loop or a healthy follower trails by. Several members often
// share one process, and a bigger cache showed only as peak RSS in the
// side-by-side bench (about 10 MB for three members at 4 MiB).
const defaultEntryCacheBytes = 1 << 20

// FormatVersion is the on-disk format of this package. A store written
// with another version is refused by Open (invariant 10 of ARCHITECTURE.md).
//
// Format 2 moved the Raft log out of Pebble into its own write-ahead
// log; Open upgrades a format-1 store (upgrade.go).
const FormatVersion uint64 = 2

// Sentinel errors.
var (
	// ErrFormat is returned by Open for a store of an unknown format version.
	ErrFormat = errors.New("storage: unknown on-disk format version")
	// ErrCompacted is returned when history below the retained window is
	// asked for. It is coord.ErrCompacted itself, so the root and the watch
	// hub hand it on without translating.
	ErrCompacted = errs.Compacted
	// ErrClosed is returned by operations on a closed store. It is
	// coord.ErrClosed itself: a store closed under a read means the
	// member closed.
	ErrClosed = errs.Closed
	// ErrSnapshotIncomplete is returned when installing a snapshot whose
	// chunks have not all arrived.
	ErrSnapshotIncomplete = errors.New("storage: snapshot chunks incomplete")
)

// Key space. One byte of prefix per kind of record; everything the state
// machine owns sits under prefixes >= prefixStateFirst so that a snapshot
// is one contiguous range.
const (
	prefixFormat     byte = 0x00 // format version record
	prefixLogEntry   byte = 0x01 // format 1 only: raft entries: prefix + index (8 bytes BE)
	prefixLogMeta    byte = 0x02 // format 1 only: hard state, truncated index/term
	prefixStaging    byte = 0x03 // snapshot chunks being received: prefix + original key
	prefixLocal      byte = 0x04 // this member's own records, never replicated (identity.go)
	prefixStateFirst byte = 0x10
	prefixStateMeta  byte = 0x10 // applied index/term, conf state, revision, sizes
	prefixKV         byte = 0x11 // user keys: prefix + key
	prefixSession    byte = 0x12 // sessions: prefix + id (8 bytes BE)
	prefixSessionKey byte = 0x13 // ephemeral index: prefix + id (8 BE) + key
	prefixHistory    byte = 0x14 // change history: prefix + revision (8 bytes BE)
	prefixProposer   byte = 0x15 // the proposer table (proposers.go)
	prefixStateEnd   byte = 0x16 // exclusive upper bound of the state range
)

// MemDisk is an in-memory disk that outlives the store opened on it, so a
// test can "crash" a member and restart it on what it had synced.
type MemDisk struct {
	fs        *vfs.MemFS
	crashable bool
	// fault is what FailWrites set: every write, sync and creation on
	// the disk returns it while set. Shared by the stores opened on the
	// disk; nil on a disk made other than by NewMemDisk or Crash.
	fault *atomic.Pointer[error]
}

// NewMemDisk returns an empty in-memory disk that remembers what was
// synced, for Crash. Each sync copies the file it syncs, so stores on it
// keep their write-ahead log files small.
func NewMemDisk() *MemDisk {
	return &MemDisk{fs: vfs.NewCrashableMem(), crashable: true, fault: new(atomic.Pointer[error])}
}

// FailWrites makes every later write, sync, file creation, rename and
// removal on the disk fail with err, as a dying or full device does (a
// full disk: an *os.PathError wrapping syscall.ENOSPC); nil makes the
// disk work again. Reads go on working. A store on the disk reports
// ErrFault at the first such failure and its member stops, having
// acknowledged only what it had synced; Crash then keeps what was
// synced, on a disk that works. It is for fault tests.
func (d *MemDisk) FailWrites(err error) {
	if d.fault == nil {
		return
	}
	if err == nil {
		d.fault.Store(nil)
		return
	}
	d.fault.Store(&err)
}

// files returns the disk's file system, through FailWrites' injector.
func (d *MemDisk) files() vfs.FS {
	if d.fault == nil {
		return d.fs
	}
	return errorfs.Wrap(d.fs, memDiskFault{d.fault})
}

// memDiskFault injects FailWrites' error into every operation that
// changes the disk.
type memDiskFault struct{ err *atomic.Pointer[error] }

func (f memDiskFault) MaybeError(op errorfs.Op) error {
	p := f.err.Load()
	if p == nil || op.Kind.ReadOrWrite() != errorfs.OpIsWrite || op.Kind == errorfs.OpFileClose || op.Kind == errorfs.OpLock {
		return nil
	}
	return *p
}

func (f memDiskFault) String() string { return "MemDisk.FailWrites" }

// Crash returns the disk as a power cut at this instant would leave it:
// everything synced, and a random part (chosen by rng; nil = none) of
// what was written but not synced.
func (d *MemDisk) Crash(rng *rand.Rand) *MemDisk {
	cfg := vfs.CrashCloneCfg{}
	if rng != nil {
		cfg.UnsyncedDataPercent = 50
		cfg.RNG = rng
	}
	return &MemDisk{fs: d.fs.CrashClone(cfg), crashable: true, fault: new(atomic.Pointer[error])}
}

// Options configure a Store.
type Options struct {
	// Dir is the data directory. "" keeps everything in memory, on Disk.
	Dir string
	// Disk is the in-memory disk used when Dir is "". nil = a fresh one.
	Disk *MemDisk
	// Logger receives storage events. nil = discard.
	Logger *slog.Logger
	// EntryCacheBytes bounds the in-memory cache of recent Raft entries.
	// 0 = 1 MiB.
	EntryCacheBytes int
	// HistoryRevisions is how many revisions of change history to keep for
	// watches. 0 = 100,000.
	HistoryRevisions int64
	// QuotaBytes bounds the size of the keyspace (keys + values), which
	// the state machine holds in memory as well as on disk. Writes that
	// would exceed it fail with StatusQuotaExceeded; deletes always work.
	// 0 = 2 GiB.
	QuotaBytes int64
	// The proposer table's bounds (proposers.go): how many log entries an
	// idle proposer is kept for, how many proposers are kept in all and
	// per owner, how many results per proposer, and how many bytes of
	// results in all and per result (larger results keep no reads). 0 =
	// the Default of each.
	ProposerRetainEntries uint64
	MaxProposers          int
	MaxProposersPerOwner  int
	MaxResultsPerProposer int
	MaxProposerBytes      int64
	MaxResultBytes        int
	// OnFault is called once, with an error wrapping ErrFault, when the
	// store meets a fault it cannot go on after (corruption, a full disk,
	// repeated I/O errors). From then on the store writes nothing and its
	// calls return that error. It may be called on one of Pebble's
	// goroutines while Pebble holds its locks: it must not block nor call
	// the store (stopping the member and closing the store later is the
	// way). nil = none; Store.Fault still reports it.
	OnFault func(error)

	// wrapFS, if set, wraps the file system under the store (tests inject
	// disk errors with it).
	wrapFS func(vfs.FS) vfs.FS
	// imageFault records a failed commit of the state machine's image
	// as the store's fault (set by Open); beforeImageCommit, if set, runs
	// before each such commit (tests hold the image writer with it).
	imageFault        func(error) error
	beforeImageCommit func()
	// tunePebble, if set, adjusts Pebble's options before Open (tests
	// stop automatic compactions with it, so the tables they corrupt are
	// the ones a manual compaction must read).
	tunePebble func(*pebble.Options)
	// segmentBytes, if set, is the Raft log's segment size on a real
	// disk (tests keep it small: every cut writes and syncs the whole
	// segment, and refusal tests hash every file).
	segmentBytes int64
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EntryCacheBytes == 0 {
		o.EntryCacheBytes = defaultEntryCacheBytes
	}
	if o.HistoryRevisions == 0 {
		o.HistoryRevisions = 100_000
	}
	if o.QuotaBytes == 0 {
		o.QuotaBytes = 2 << 30
	}
	setDefault(&o.ProposerRetainEntries, DefaultProposerRetainEntries)
	setDefault(&o.MaxProposers, DefaultMaxProposers)
	setDefault(&o.MaxProposersPerOwner, DefaultMaxProposersPerOwner)
	setDefault(&o.MaxResultsPerProposer, DefaultMaxResultsPerProposer)
	setDefault(&o.MaxProposerBytes, DefaultMaxProposerBytes)
	setDefault(&o.MaxResultBytes, DefaultMaxResultBytes)
}

func setDefault[T int | int64 | uint64](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

func (o *Options) wrap(fs vfs.FS) vfs.FS {
	if o.wrapFS == nil {
		return fs
	}
	return o.wrapFS(fs)
}

// memTableBytes returns the size of a store's memtables: 2 MiB on
// average, drawn at random between 1.5 and 2.5 MiB for each store.
//
// The Raft log is in storage/wal and the image is written behind the
// applied index, so a flush never holds a commit up. Half of Pebble's 4
// MiB saves ~4 MiB resident per member (bench client-put, three members
// per process: peak RSS 117 -> 106 MB) for twice the flushes, which share
// the disk and CPU with commits. The spread is for the members of one
// cell: they apply the same entries, so with equal memtables they would
// flush, and then compact, at the same moments, and where they share CPUs
// (a test cell, members on one machine) those bursts together keep the
// Raft loops from a CPU for tens of milliseconds (bench/RESULTS.md: put
// p99 at 64 clients).
func memTableBytes() uint64 {
	return 3<<19 + rand.Uint64N(1<<20)
}

// The L0 read amplification at which Pebble compacts L0 into the base
// level (its default 4), and at which it stops the image writer's commits
// until compactions catch up (default 12; a stop holds no Raft commit,
// only the image behind the applied index, until the writer's queue
// reaches maxQueuedBytes and Apply waits for it). At 16 rather than 4, puts at
// 64 callers over 40 s, one member per process, cost 115 µs of CPU
// rather than 150, at 14,500 ops/s rather than 11,300 (bench/RESULTS.md,
// issue 27: the L0 thresholds).
const (
	l0CompactionThreshold = 16
	l0StopWritesThreshold = 64
)

// Store is one member's data directory: its Raft log and its state
// machine.
type Store struct {
	db     *pebble.DB
	w      *wal.Log
	log    *RaftLog
	sm     *StateMachine
	faults *faults
	marks  *marks

	closeOnce sync.Once
	closeErr  error
}

// Open opens (or creates) the store described by opts.
//
// It returns an error wrapping ErrLostState when the directory holds
// less than this member is known to have made durable (see marks.go),
// or Pebble finds its write-ahead log corrupt or the Raft log a damaged
// durable record, and one wrapping ErrFault
// when a fault stops it while opening. A directory it refuses (those, or
// ErrFormat) is left exactly as it was, the evidence of what was lost:
// everything refused is found before anything is written (inspectDir).
func Open(opts Options) (s *Store, err error) {
	opts.setDefaults()
	f := newFaults(opts.Logger, opts.OnFault)
	popts := &pebble.Options{
		Logger:        faultLogger{pebbleLogger{opts.Logger}, f},
		EventListener: f.listener(),
		// The state machine reads its live state from memory, so Pebble
		// only reads for watch history and snapshots: a small block cache does, and
		// several members often share one process.
		CacheSize:    8 << 20,
		MemTableSize: memTableBytes(),
		// Columnar blocks (sstable format v5): Pebble's row-block writer
		// hands each block to its write queue in a task from a process-wide
		// pool whose channel belongs to the goroutine that made it, which a
		// testing/synctest bubble (the simulator's, coordtest's in virtual
		// time) refuses to share; the columnar writer makes its channel per
		// table. An older directory is raised to it when opened.
		FormatMajorVersion: pebble.FormatColumnarBlocks,
		// Tuned for write amplification, not reads: the live state is read
		// from memory, so Pebble is read only for watch history, snapshots
		// and the open, and an L0 of many sublevels costs little there.
		// Each L0 compaction merges what came down with the overlapping
		// base level, so waiting for more sublevels merges the same base
		// level once for more data.
		L0CompactionThreshold: l0CompactionThreshold,
		L0StopWritesThreshold: l0StopWritesThreshold,
	}
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	dir := opts.Dir
	var fs *faultFS
	// A segment is preallocated and filled with zeros when cut; on a
	// crashable disk every sync copies the whole file, so keep it small.
	segBytes := int64(0)
	if dir == "" {
		if opts.Disk == nil {
			// Nobody can crash this disk: skip the bookkeeping of syncs.
			opts.Disk = &MemDisk{fs: vfs.NewMem()}
		}
		fs = &faultFS{FS: opts.wrap(opts.Disk.files()), f: f}
		popts.FS = fs
		if opts.Disk.crashable {
			// A sync copies the whole file on a crashable disk: rotate
			// the write-ahead log often so each copy stays small.
			popts.MemTableSize = 256 << 10
			segBytes = 64 << 10
		} else {
			segBytes = 1 << 20
		}
		dir = "/coord"
	} else {
		fs = &faultFS{FS: opts.wrap(vfs.Default), f: f}
		popts.FS = fs
		popts.WithFSDefaults() // disk health checks, as Pebble's default FS has
	}
	if opts.tunePebble != nil {
		opts.tunePebble(popts)
	}
	if opts.segmentBytes != 0 {
		segBytes = opts.segmentBytes
	}
	// A commit that fails while opening panics in Pebble (faultLogger).
	defer recoverFault(&err)
	walOpts := wal.Options{FS: fs, Dir: fs.PathJoin(dir, walDir), SegmentBytes: segBytes, Logger: opts.Logger}
	// Everything Open refuses is refused here, before a byte is written.
	rec, err := inspectDir(fs, dir, popts.Logger, walOpts)
	if err != nil {
		return nil, err
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		if errors.Is(err, pebble.ErrCorruption) {
			return nil, fmt.Errorf("%w: open %s: %w", ErrLostState, dir, err)
		}
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	st := &Store{db: db, faults: f}
	defer func() {
		if err == nil {
			err = f.get()
		}
		if err != nil {
			if st.marks != nil {
				st.marks.close()
			}
			st.closeDB()
			s = nil
		}
	}()
	if err := st.checkFormat(fs, walOpts); err != nil {
		return nil, err
	}
	if rec != nil {
		// Nothing wrote to the log since it was inspected.
		st.w, err = rec.Open()
	} else {
		st.w, err = wal.Open(walOpts)
	}
	if err != nil {
		if errors.Is(err, wal.ErrCorrupt) {
			return nil, fmt.Errorf("%w: %w", ErrLostState, err)
		}
		return nil, fmt.Errorf("storage: open raft log: %w", err)
	}
	opts.imageFault = f.fail
	st.sm, err = newStateMachine(db, &opts)
	if err != nil {
		return nil, err
	}
	if err := st.sm.setStaging(fs, dir, popts); err != nil {
		return nil, err
	}
	st.log = newRaftLog(st.w, &opts, st.sm, f)
	if err := st.log.reconcile(st.sm.cur.index, st.sm.cur.term); err != nil {
		return nil, err
	}
	term, vote, last := st.raftState()
	st.marks, err = openMarks(db, fs, dir, term, vote, last)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// closeDB closes Pebble, and the state machine and the Raft log if they
// were opened.
func (s *Store) closeDB() error {
	if s.sm != nil {
		s.sm.close()
	}
	var err error
	if s.w != nil {
		err = s.w.Close()
	}
	return errors.Join(err, s.db.Close())
}

// raftState returns the persisted term and vote and the last log index.
func (s *Store) raftState() (term, vote, last uint64) {
	s.log.mu.Lock()
	hs := s.log.hardState
	s.log.mu.Unlock()
	return hs.GetTerm(), hs.GetVote(), s.log.last.Load()
}

// Fault returns the fault that stopped the store (wrapping ErrFault), or
// nil.
func (s *Store) Fault() error { return s.faults.get() }

// checkFormat records the format of a new store, upgrades a format-1
// one, and refuses any other. A format-2 store that had a Raft log and
// lost its directory is refused too: an empty log would look new.
func (s *Store) checkFormat(fs vfs.FS, walOpts wal.Options) error {
	version, found, err := readFormat(s.db)
	if err != nil {
		return err
	}
	if !found {
		return s.db.Set([]byte{prefixFormat}, appendUint64(nil, FormatVersion), pebble.Sync)
	}
	switch version {
	case FormatVersion:
		_, closer, err := s.db.Get(marksKey)
		if err != nil {
			// Not opened far enough to have written a log yet.
			return nil
		}
		closer.Close()
		if _, err := fs.Stat(walOpts.Dir); err != nil {
			return fmt.Errorf("%w: raft log %s: %w", ErrLostState, walOpts.Dir, err)
		}
		return nil
	case 1:
		return upgradeV1(s.db, fs, walOpts.Dir, func() (*wal.Log, error) { return wal.Open(walOpts) })
	}
	return fmt.Errorf("%w: found %d, want %d", ErrFormat, version, FormatVersion)
}

// readFormat returns the store's format version (0 for a record it
// cannot read), and false for none recorded.
func readFormat(db pebble.Reader) (version uint64, found bool, err error) {
	val, closer, err := db.Get([]byte{prefixFormat})
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("storage: read format: %w", err)
	}
	defer closer.Close()
	if len(val) == 8 {
		version = readUint64(val)
	}
	return version, true, nil
}

// RaftLog returns the Raft half of the store.
func (s *Store) RaftLog() *RaftLog { return s.log }

// StateMachine returns the state machine half of the store.
func (s *Store) StateMachine() *StateMachine { return s.sm }

// IsNew reports whether the store has never been bootstrapped nor
// received a snapshot: a founding member then calls Bootstrap.
func (s *Store) IsNew() bool {
	return s.sm.AppliedIndex() == 0 && s.log.lastIndexNoErr() == 0 && len(s.sm.ConfState().GetVoters()) == 0
}

// Bootstrap records the founding membership of a new cell (Raft's conf
// state and the address book) as a snapshot at index 1, term 1, the same
// on every founding member. The log starts after it, so a member that
// joins later cannot replay its way to the membership: it gets a
// snapshot, which carries the conf state.
func (s *Store) Bootstrap(cs *pb.ConfState, members []MemberInfo) (err error) {
	if err := s.faults.get(); err != nil {
		return err
	}
	defer recoverFault(&err)
	b := s.db.NewBatch()
	defer b.Close()
	m, err := s.sm.bootstrapInto(b, cs, members, 1, 1)
	if err != nil {
		return err
	}
	meta := &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1))}
	hs := &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}
	// The state machine first: a crash before the log's reset leaves a
	// log that Open resets to it (RaftLog.reconcile).
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("storage: bootstrap: %w", err)
	}
	s.sm.afterBootstrap(m, cs)
	if err := s.log.reset(meta, hs); err != nil {
		return err
	}
	term, vote, last := s.raftState()
	return s.marks.advance(term, vote, last, false)
}

// InstallSnapshot replaces the state machine with the staged snapshot
// received for snap, synced, and then resets the Raft log to start after
// it (RaftLog.reconcile completes the reset after a crash in between).
func (s *Store) InstallSnapshot(snap *pb.Snapshot) (err error) {
	if err := s.faults.get(); err != nil {
		return err
	}
	defer recoverFault(&err)
	inst, err := s.sm.prepareInstall(snap)
	if err != nil {
		return err
	}
	defer inst.discard()
	// The log may end beyond the snapshot (a tail it conflicts with).
	if err := s.marks.lowerTo(snap.GetMetadata().GetIndex()); err != nil {
		return err
	}
	// The state machine first: a crash before the log's reset leaves a
	// log that Open resets to it (RaftLog.reconcile).
	if err := inst.commit(); err != nil {
		return err
	}
	s.sm.afterInstall(snap)
	if err := s.log.reset(snap.GetMetadata(), nil); err != nil {
		return err
	}
	term, vote, last := s.raftState()
	return s.marks.advance(term, vote, last, false)
}

// Append persists hs and ents in the Raft log like RaftLog.Append, and
// keeps the account of what is durable that Open checks the log against
// (marks.go). It is what the Raft loop calls: a new term or vote costs
// one more sync, before Append returns (so before raft's messages that
// depend on it go out); a synced append costs one small write, no sync.
func (s *Store) Append(hs *pb.HardState, ents []*pb.Entry, sync bool) (err error) {
	if err := s.faults.get(); err != nil {
		return err
	}
	defer recoverFault(&err)
	if len(ents) > 0 {
		newLast := ents[0].GetIndex() + uint64(len(ents)) - 1
		if err := s.marks.lowerTo(newLast); err != nil {
			return err
		}
	}
	if err := s.log.Append(hs, ents, sync); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	term, vote, last := s.raftState()
	return s.marks.advance(term, vote, last, false)
}

// Sync makes every write so far durable, the state machine's image as of
// the applied index included: the Raft log may then drop what it applied.
func (s *Store) Sync() (err error) {
	if err := s.faults.get(); err != nil {
		return err
	}
	defer recoverFault(&err)
	if err := s.sm.syncImage(); err != nil {
		return err
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage: sync: %w", err)
	}
	return s.log.sync()
}

// Close closes the database. It is safe to call more than once. A store
// without a fault first syncs and records exactly what is durable, so
// the next Open checks the log against all of it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var err error
		if s.faults.get() == nil {
			err = s.closeMarks()
		}
		err = errors.Join(err, s.marks.close())
		s.closeErr = errors.Join(err, s.closeDB())
	})
	return s.closeErr
}

func (s *Store) closeMarks() (err error) {
	defer recoverFault(&err)
	term, vote, last := s.raftState()
	if err := s.sm.syncImage(); err != nil {
		return err
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	if err := s.log.sync(); err != nil {
		return err
	}
	return s.marks.advance(term, vote, last, true)
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf panics: a library must not exit the process. The Store gives
// Pebble a faultLogger instead (faults.go), which never panics on
// Pebble's own goroutines; this one serves databases opened without a
// Store (tests).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	panic("storage: pebble fatal: " + msg)
}

func appendUint64(b []byte, v uint64) []byte {
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func readUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}
