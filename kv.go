package coord

import "github.com/coordcell/coord/internal/command"

// SessionID identifies a session in the cell; unique forever.
type SessionID int64

// KV is a key as the cell stores it.
type KV struct {
	Key       string
	Value     []byte
	Version   int64 // 1 on create, +1 on each put; 0 = absent
	CreateRev int64 // the revision that created the key
	ModRev    int64 // the revision of the last put
	// Session owns an ephemeral key (deleted when the session ends);
	// 0 for an ordinary key.
	Session SessionID
}

func fromCmdKV(kv command.KV) KV {
	return KV{Key: kv.Key, Value: kv.Value, Version: kv.Version,
		CreateRev: kv.CreateRev, ModRev: kv.ModRev, Session: SessionID(kv.Session)}
}

// ReadOption changes how Get and List read.
type ReadOption func(*readOptions)

type readOptions struct {
	serializable bool
}

// Serializable makes a read answer from this member's applied state
// without confirming with the leader: faster, and available on a
// minority side, but possibly stale.
func Serializable() ReadOption {
	return func(o *readOptions) { o.serializable = true }
}

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WriteOption changes how Put and Delete write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	ifVersion *int64
	session   int64
}

// IfVersion makes the write conditional on the key's current version:
// 0 means "must not exist" (create only). A failed condition returns
// ErrConflict and changes nothing.
func IfVersion(v int64) WriteOption {
	return func(o *writeOptions) { o.ifVersion = &v }
}

// Ephemeral makes the written key belong to session s: it is deleted, in
// the same committed change as the session's end, when s expires or is
// closed. A write naming a session that already ended fails with
// ErrSessionExpired.
func Ephemeral(s *Session) WriteOption {
	return func(o *writeOptions) { o.session = int64(s.id) }
}

func writeOpts(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}
