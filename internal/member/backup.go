package member

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/raftnode"
	"github.com/coordcell/coord/storage"
	"github.com/vmihailenco/msgpack/v5"
	pb "go.etcd.io/raft/v3/raftpb"
)

// A backup is backupMagic, one format byte, then a msgpack stream (a
// backupHeader, then header.Keys backupKVs), then the SHA-256 of every
// byte before it. The checksum is last so that Backup streams; Restore
// reads the whole backup and checks it before it writes anything.
const (
	backupMagic   = "coordbk\x00"
	backupFormat1 = 1
)

type backupHeader struct {
	Cell     uint64 `msgpack:"c"` // the cell it was taken from
	Member   string `msgpack:"m"` // the member that took it
	Revision int64  `msgpack:"r"` // every key as of this revision
	Keys     int    `msgpack:"k"`
	Taken    int64  `msgpack:"t"` // Unix nanoseconds; informational only
}

type backupKV struct {
	Key       string `msgpack:"k"`
	Value     []byte `msgpack:"v"`
	Version   int64  `msgpack:"n"`
	CreateRev int64  `msgpack:"c"`
	ModRev    int64  `msgpack:"m"`
	Session   int64  `msgpack:"s"`
}

// Backup writes an online, consistent backup of the cell's keys to w:
// every key, with its version and revisions, as of one revision that is
// at least as new as any write acknowledged before the call (it follows
// a linearizable read). Writes may go on meanwhile. The backup carries
// its format version and a checksum; Restore seeds a new cell from it.
//
// Ephemeral keys are included (as they were), and Restore drops them;
// the change history is not (a restored cell's watches start at the
// backup's revision).
func (n *Node) Backup(ctx context.Context, w io.Writer) error {
	kvs, rev, err := spi.List(ctx, n.Backend(), "", spi.ReadOptions{})
	if err != nil {
		return err
	}
	h := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	bw.WriteString(backupMagic)
	bw.WriteByte(backupFormat1)
	enc := msgpack.NewEncoder(bw)
	hdr := backupHeader{Cell: n.raft.CellID(), Member: n.cfg.Name, Revision: rev,
		Keys: len(kvs), Taken: time.Now().UnixNano()}
	if err := enc.Encode(&hdr); err != nil {
		return fmt.Errorf("coord: backup: %w", err)
	}
	for _, kv := range kvs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := backupKV{Key: kv.Key, Value: kv.Value, Version: kv.Version,
			CreateRev: kv.CreateRev, ModRev: kv.ModRev, Session: int64(kv.Session)}
		if err := enc.Encode(&rec); err != nil {
			return fmt.Errorf("coord: backup: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("coord: backup: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("coord: backup: %w", err)
	}
	n.cfg.Logger.Info("backup written", "member", n.cfg.Name, "revision", rev, "keys", len(kvs))
	return nil
}

// BackupInfo describes a backup that Restore read.
type BackupInfo struct {
	Cell     uint64    // the ID of the cell it was taken from
	Member   string    // the member that took it
	Revision int64     // its revision
	Keys     int       // the keys it holds, ephemeral ones included
	Taken    time.Time // when, by the clock of the member that took it
	Checksum string    // its SHA-256, in hex
}

// ReadBackup reads and checks a whole backup from r. It returns
// errs.BadBackup for a truncated or corrupt one, errs.BackupVersion for one of
// an unknown format.
func ReadBackup(r io.Reader) (BackupInfo, []command.KV, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return BackupInfo{}, nil, fmt.Errorf("%w: read: %w", errs.BadBackup, err)
	}
	if len(data) < len(backupMagic)+1+sha256.Size || string(data[:len(backupMagic)]) != backupMagic {
		return BackupInfo{}, nil, fmt.Errorf("%w: not a coord backup, or cut short (%d bytes)", errs.BadBackup, len(data))
	}
	if f := data[len(backupMagic)]; f != backupFormat1 {
		return BackupInfo{}, nil, fmt.Errorf("%w: format %d (this version reads %d)", errs.BackupVersion, f, backupFormat1)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	got := sha256.Sum256(body)
	if !bytes.Equal(got[:], sum) {
		return BackupInfo{}, nil, fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", errs.BadBackup)
	}
	dec := msgpack.NewDecoder(bytes.NewReader(body[len(backupMagic)+1:]))
	var hdr backupHeader
	if err := dec.Decode(&hdr); err != nil {
		return BackupInfo{}, nil, fmt.Errorf("%w: header: %w", errs.BadBackup, err)
	}
	if hdr.Keys < 0 || hdr.Revision < 0 {
		return BackupInfo{}, nil, fmt.Errorf("%w: header: %d keys at revision %d", errs.BadBackup, hdr.Keys, hdr.Revision)
	}
	var kvs []command.KV
	for range hdr.Keys {
		var rec backupKV
		if err := dec.Decode(&rec); err != nil {
			return BackupInfo{}, nil, fmt.Errorf("%w: key %d of %d: %w", errs.BadBackup, len(kvs)+1, hdr.Keys, err)
		}
		kvs = append(kvs, command.KV{Key: rec.Key, Value: rec.Value, Version: rec.Version,
			CreateRev: rec.CreateRev, ModRev: rec.ModRev, Session: rec.Session})
	}
	info := BackupInfo{Cell: hdr.Cell, Member: hdr.Member, Revision: hdr.Revision, Keys: hdr.Keys,
		Taken: time.Unix(0, hdr.Taken), Checksum: hex.EncodeToString(sum)}
	return info, kvs, nil
}

// RestoreOptions describe the member a data directory is restored for.
type RestoreOptions struct {
	// Name is the member the directory is for (its Config.Name).
	// Required.
	Name string
	// Peers are the new cell's founding voters, the same list on every
	// member restored; it must include Name. Empty = a cell of Name
	// alone (with Addr).
	Peers []Peer
	// Addr is Name's address when Peers is empty.
	Addr string
	// CellName distinguishes cells restored from the same backup onto
	// the same peers (see Config.CellName).
	CellName string
	// Logger receives what Restore did. nil = discard.
	Logger *slog.Logger
}

// Restore seeds dir, offline, as the data directory of member
// opts.Name of a new cell whose keys are the backup's, in the manner of
// "etcdutl snapshot restore". Run it for every founding member with the
// same backup and options but Name, then Open each member on its dir
// (Config.Peers is then read from the directory, not the Config).
//
// The new cell keeps every key's version and revisions and the backup's
// revision, so fencing tokens it grants exceed every earlier one; it has
// a new cell ID (members of the old cell cannot talk to it), no
// sessions, and no ephemeral keys, since their holders are gone.
//
// dir must not exist or be empty. A backup that is truncated, corrupt or
// of an unknown format is refused (errs.BadBackup, errs.BackupVersion)
// before anything is written; Restore builds the directory beside dir and
// renames it into place last, so dir is never left half restored.
func Restore(dir string, r io.Reader, opts RestoreOptions) error {
	if opts.Name == "" {
		return fmt.Errorf("%w: RestoreOptions.Name is required", errs.InvalidConfig)
	}
	peers := opts.Peers
	if len(peers) == 0 {
		peers = []Peer{{Name: opts.Name, Addr: opts.Addr}}
	}
	if !slices.ContainsFunc(peers, func(p Peer) bool { return p.Name == opts.Name }) {
		return fmt.Errorf("%w: Peers must include %q", errs.InvalidConfig, opts.Name)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%w: %s is not empty", errs.DataDir, dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	info, kvs, err := ReadBackup(r)
	if err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var live []command.KV
	dropped := 0
	for _, kv := range kvs {
		if kv.Session != 0 {
			dropped++
			continue
		}
		live = append(live, command.KV{Key: kv.Key, Value: kv.Value, Version: kv.Version,
			CreateRev: kv.CreateRev, ModRev: kv.ModRev})
	}
	// Every member restored from one backup with one set of options
	// derives the same cell ID, and none equals the old cell's.
	cell := cellID(opts.CellName+"\x00restored from "+info.Checksum, peers)
	tmp := dir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	if err := seedDir(tmp, cell, opts.Name, peers, live, info.Revision, log); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	os.Remove(dir) // empty or absent, checked above
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	log.Info("restored backup", "member", opts.Name, "dir", dir, "revision", info.Revision,
		"keys", len(live), "ephemeral_dropped", dropped, "from_cell", fmt.Sprintf("%016x", info.Cell),
		"cell", fmt.Sprintf("%016x", cell))
	return nil
}

func seedDir(dir string, cell uint64, name string, peers []Peer, kvs []command.KV, rev int64, log *slog.Logger) (err error) {
	store, err := storage.Open(storage.Options{Dir: dir, Logger: log})
	if err != nil {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	defer func() {
		if cerr := store.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%w: %w", errs.DataDir, cerr)
		}
	}()
	if _, err := store.SaveIdentity(storage.Identity{CellID: cell, Name: name}); err != nil {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	cs := &pb.ConfState{}
	var book []storage.MemberInfo
	for _, p := range peers {
		id := raftnode.IDFromName(p.Name)
		cs.Voters = append(cs.Voters, id)
		book = append(book, storage.MemberInfo{ID: id, Name: p.Name, Addr: p.Addr})
	}
	if err := store.Seed(cs, book, kvs, rev); err != nil {
		return fmt.Errorf("%w: %w", errs.DataDir, err)
	}
	return nil
}
