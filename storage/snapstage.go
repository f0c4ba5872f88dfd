package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/internal/wirebytes"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A snapshot being received is written once. Its pairs arrive in key
// order, so all but the meta prefix's stream straight into an sstable in
// the store's directory; the meta pairs (a handful, and the conf state is
// Raft's, from the snapshot's metadata) go into a second small table when
// it installs. The install ingests both with an excise of the state
// range: one atomic step of Pebble's that drops the old state and adds the
// new, applied index and conf state included, at the bottom of the LSM,
// outside Pebble's WAL and with no compaction to follow. Staging the pairs
// under a prefix of their own instead wrote the data three times (the
// staged pairs, their flush and compactions, and the install batch that
// copied them under their keys), which bounded a new member's catch-up.
//
// The live state is decoded as the chunks arrive, so a record this member
// cannot read is found before the install, which then refuses it.

// The staged tables' names in the store's directory; Pebble ignores names
// that are not its own. What a crash leaves of them is removed on open:
// a staging is never resumed, Raft sends the snapshot again.
const (
	stagedBodyFile = "snapshot-staged-body.sst"
	stagedMetaFile = "snapshot-staged-meta.sst"
)

// stageDisk is where staged tables are written and how.
type stageDisk struct {
	fs    vfs.FS
	dir   string
	wopts sstable.WriterOptions
}

// stagingState tracks the snapshot being received.
type stagingState struct {
	active      bool
	index, term uint64
	next        int // the seq expected next
	complete    bool

	body      *sstable.Writer // the pairs past the meta prefix; nil until the first
	last      []byte          // the last key staged: keys must ascend
	meta      [][]byte        // the meta prefix's pairs, key then value
	metaBytes int             // their size, bounded by maxStagedMetaBytes
	mem       memState        // the live state decoded so far
	memErr    error           // the first record of it that does not decode
}

// maxStagedMetaBytes bounds the meta prefix's pairs, held in memory while
// a snapshot stages: a state has a handful, a few hundred bytes.
const maxStagedMetaBytes = 1 << 20

// setStaging tells the state machine where to stage snapshots: the
// Pebble database's own directory and file system (an ingest links the
// files), with its writer options. It removes what a crash left there.
func (sm *StateMachine) setStaging(fs vfs.FS, dir string, popts *pebble.Options) error {
	o := popts.Clone()
	o.EnsureDefaults()
	sm.disk = stageDisk{fs: fs, dir: dir, wopts: o.MakeWriterOptions(len(o.Levels)-1, sm.db.TableFormat())}
	for _, name := range []string{stagedBodyFile, stagedMetaFile} {
		if err := fs.Remove(fs.PathJoin(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("storage: remove a staged snapshot: %w", err)
		}
	}
	// Versions before the staged tables kept staged pairs under a
	// prefix of their own; a crash could leave some.
	it, err := sm.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixStaging}, UpperBound: []byte{prefixStaging + 1}})
	if err != nil {
		return fmt.Errorf("storage: open: %w", err)
	}
	stale := it.First()
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: open: %w", err)
	}
	if stale {
		if err := sm.db.DeleteRange([]byte{prefixStaging}, []byte{prefixStaging + 1}, pebble.NoSync); err != nil {
			return fmt.Errorf("storage: open: %w", err)
		}
	}
	return nil
}

func (sm *StateMachine) stagedPath(name string) string { return sm.disk.fs.PathJoin(sm.disk.dir, name) }

// StageChunk stores chunk seq of the snapshot at index/term being received.
//
// Chunk 0 starts a new staging, discarding whatever was staged before;
// later chunks must follow in order for the same index and term, their
// keys after the last one staged. A chunk that does not (or does not
// decode) returns ErrSnapshotChunk and is ignored.
func (sm *StateMachine) StageChunk(index, term uint64, seq int, data []byte, last bool) error {
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	st := &sm.stage
	switch {
	case seq < 0:
		return fmt.Errorf("%w: negative sequence %d", ErrSnapshotChunk, seq)
	case seq == 0:
	case !st.active || st.index != index || st.term != term:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d, but none of it is staged",
			ErrSnapshotChunk, seq, index, term)
	case st.complete:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d after its last chunk",
			ErrSnapshotChunk, seq, index, term)
	case seq != st.next:
		return fmt.Errorf("%w: chunk %d of snapshot %d/%d, want chunk %d",
			ErrSnapshotChunk, seq, index, term, st.next)
	}
	after := st.last
	if seq == 0 {
		after = nil
	}
	if err := checkChunk(data, after); err != nil {
		return fmt.Errorf("%w (chunk %d of snapshot %d/%d)", err, seq, index, term)
	}
	if seq == 0 {
		sm.dropStaging()
		*st = stagingState{active: true, index: index, term: term, mem: newMemState()}
	}
	if err := sm.stagePairs(st, data); err != nil {
		// The writer failed (the disk): nothing of this staging can be
		// trusted, and Raft sends the snapshot again.
		sm.dropStaging()
		return fmt.Errorf("storage: stage snapshot: %w", err)
	}
	st.next = seq + 1
	st.complete = last
	return nil
}

// checkChunk decodes a chunk without keeping anything: every pair whole,
// its key in the state range and after the one before (after, then the
// chunk's own), so that staging it cannot fail half way on the chunk's
// account.
func checkChunk(data []byte, after []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrSnapshotChunk)
	}
	if data[0] != chunkFormat1 {
		return fmt.Errorf("%w: %w: chunk format %d", ErrSnapshotChunk, ErrFormat, data[0])
	}
	r := wirebytes.NewReader(data[1:], ErrCorrupt)
	prev := after
	for r.Len() > 0 {
		k, _ := r.Slice(), r.Slice()
		if r.Err() != nil {
			return fmt.Errorf("%w: truncated pair", ErrSnapshotChunk)
		}
		// A key outside the state range could overwrite the Raft log or
		// the member's own records.
		if len(k) == 0 || k[0] < prefixStateFirst || k[0] >= prefixStateEnd {
			return fmt.Errorf("%w: key %x outside the state range", ErrSnapshotChunk, k)
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return fmt.Errorf("%w: key %x after %x: out of order", ErrSnapshotChunk, k, prev)
		}
		prev = k
	}
	return nil
}

// stagePairs stages a chunk checkChunk passed.
func (sm *StateMachine) stagePairs(st *stagingState, data []byte) error {
	r := wirebytes.NewReader(data[1:], ErrCorrupt)
	for r.Len() > 0 {
		k, v := r.Slice(), r.Slice()
		st.last = append(st.last[:0], k...)
		switch {
		case bytes.Equal(k, metaAppliedKey), bytes.Equal(k, metaConfKey):
			// Checked against the metadata at install.
		case st.memErr == nil:
			st.memErr = st.mem.add(k, v)
		}
		if k[0] == prefixStateMeta {
			if st.metaBytes += len(k) + len(v); st.metaBytes > maxStagedMetaBytes {
				return fmt.Errorf("%w: meta records past %d bytes", ErrSnapshotChunk, maxStagedMetaBytes)
			}
			st.meta = append(st.meta, bytes.Clone(k), bytes.Clone(v))
			continue
		}
		if st.body == nil {
			if sm.disk.fs == nil {
				return errors.New("no staging directory") // setStaging was not called: a bug
			}
			f, err := sm.disk.fs.Create(sm.stagedPath(stagedBodyFile), vfs.WriteCategoryUnspecified)
			if err != nil {
				return err
			}
			st.body = sstable.NewWriter(objstorageprovider.NewFileWritable(f), sm.disk.wopts)
		}
		if err := st.body.Set(k, v); err != nil {
			return err
		}
	}
	return nil
}

// dropStaging abandons the staging under way and removes its table.
// stageMu must be held.
func (sm *StateMachine) dropStaging() {
	st := &sm.stage
	if st.body != nil {
		_ = st.body.Close() // its file is removed next: an error is moot
		st.body = nil
	}
	if st.active {
		_ = sm.disk.fs.Remove(sm.stagedPath(stagedBodyFile))
	}
	*st = stagingState{}
}

// StagedComplete reports whether every chunk of the snapshot at index/term arrived.
func (sm *StateMachine) StagedComplete(index, term uint64) bool {
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	st := &sm.stage
	return st.active && st.complete && st.index == index && st.term == term
}

// A pendingInstall is a complete staging checked against its snapshot's
// metadata and written out, ready to replace the state.
type pendingInstall struct {
	sm    *StateMachine
	paths []string
	meta  smMeta
	mem   memState
	done  bool
}

// prepareInstall checks the staged snapshot against snap's metadata,
// finishes its tables (synced, as an ingest requires) and writes the meta
// table, with snap's conf state, which Raft goes by. Nothing of the state
// changes until commit; a refusal leaves the staging as it was.
func (sm *StateMachine) prepareInstall(snap *pb.Snapshot) (*pendingInstall, error) {
	if err := sm.enter(); err != nil {
		return nil, err
	}
	defer sm.life.RUnlock()
	meta := snap.GetMetadata()
	index, term := meta.GetIndex(), meta.GetTerm()
	rev, err := decodeSnapData(snap.GetData())
	if err != nil {
		return nil, fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, err)
	}
	conf, err := encodeConf(meta.GetConfState())
	if err != nil {
		return nil, err
	}
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	st := &sm.stage
	if !st.active || !st.complete || st.index != index || st.term != term {
		return nil, fmt.Errorf("%w: snapshot %d/%d", ErrSnapshotIncomplete, index, term)
	}
	var (
		m       smMeta
		sawMeta bool
		pairs   [][2][]byte
	)
	for i := 0; i < len(st.meta); i += 2 {
		k, v := st.meta[i], st.meta[i+1]
		switch {
		case bytes.Equal(k, metaAppliedKey):
			if m, err = decodeMeta(v); err != nil {
				return nil, fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, err)
			}
			if m.index != index || m.term != term || m.rev != rev {
				return nil, fmt.Errorf("%w: staged state is at index %d term %d revision %d, snapshot %d/%d says revision %d",
					ErrCorrupt, m.index, m.term, m.rev, index, term, rev)
			}
			sawMeta = true
		case bytes.Equal(k, metaConfKey):
			continue // the metadata's, below
		}
		pairs = append(pairs, [2][]byte{k, v})
	}
	if !sawMeta {
		return nil, fmt.Errorf("%w: snapshot %d/%d has no applied state", ErrCorrupt, index, term)
	}
	if st.memErr != nil {
		return nil, fmt.Errorf("storage: install snapshot %d/%d: %w", index, term, st.memErr)
	}
	pairs = append(pairs, [2][]byte{metaConfKey, conf})
	slices.SortFunc(pairs, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })

	p := &pendingInstall{sm: sm, meta: m, mem: st.mem}
	if st.body != nil {
		err := st.body.Close()
		st.body = nil
		if err != nil {
			sm.dropStaging()
			return nil, fmt.Errorf("storage: install snapshot: %w", err)
		}
		p.paths = append(p.paths, sm.stagedPath(stagedBodyFile))
	}
	metaPath := sm.stagedPath(stagedMetaFile)
	if err := sm.writeTable(metaPath, pairs); err != nil {
		sm.dropStaging()
		return nil, fmt.Errorf("storage: install snapshot: %w", err)
	}
	p.paths = append(p.paths, metaPath)
	return p, nil
}

// writeTable writes pairs, in key order, as a synced sstable at path.
func (sm *StateMachine) writeTable(path string, pairs [][2][]byte) error {
	f, err := sm.disk.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sm.disk.wopts)
	for _, kv := range pairs {
		if err := w.Set(kv[0], kv[1]); err != nil {
			_ = w.Close()
			return err
		}
	}
	return w.Close()
}

// commit replaces the state range with the staged tables, in one ingest
// that Pebble makes durable before it returns.
func (p *pendingInstall) commit() error {
	sm := p.sm
	if err := sm.enter(); err != nil {
		return err
	}
	defer sm.life.RUnlock()
	// A batch still queued would land on top of the installed state.
	if err := sm.drainImage(); err != nil {
		return err
	}
	span := pebble.KeyRange{Start: []byte{prefixStateFirst}, End: []byte{prefixStateEnd}}
	if _, err := sm.db.IngestAndExcise(context.Background(), p.paths, nil, nil, span); err != nil {
		return fmt.Errorf("storage: install snapshot: %w", err)
	}
	p.done = true // an ingest removes the files it took
	p.mem.props.settle()
	sm.installed, sm.installedMem = p.meta, p.mem
	return nil
}

// discard removes the staged tables of an install that did not commit,
// and the staging with them.
func (p *pendingInstall) discard() {
	if p.done {
		return
	}
	sm := p.sm
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	for _, path := range p.paths {
		_ = sm.disk.fs.Remove(path)
	}
	sm.stage = stagingState{}
}

// afterInstall makes the installed snapshot the in-memory state, once
// the install committed.
func (sm *StateMachine) afterInstall(snap *pb.Snapshot) {
	if err := sm.enter(); err != nil {
		return
	}
	defer sm.life.RUnlock()
	sm.applyMu.Lock()
	defer sm.applyMu.Unlock()
	sm.stageMu.Lock()
	defer sm.stageMu.Unlock()
	m, cs, err := readMeta(sm.db)
	if err != nil {
		// The install committed, so the disk is right; memory falls back
		// on what the install wrote rather than keeping the old state.
		sm.opts.Logger.Error("storage: reload state after snapshot install", "err", err)
		m, cs = sm.installed, proto.CloneOf(snap.GetMetadata().GetConfState())
	}
	mem := sm.installedMem
	if mem.keys == nil {
		// commit always leaves the state it wrote; should it not have,
		// the disk has it.
		if mem, err = loadMemState(sm.db); err != nil {
			sm.opts.Logger.Error("storage: reload state after snapshot install", "err", err)
			mem = newMemState()
		}
	}
	sm.publish(m, cs, mem)
	sm.installedMem = memState{}
	sm.stage = stagingState{}
}
