package coord

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/raftnode"
)

// Every write is exactly-once: it carries the name of its proposer (the
// member's boot, or the client) and a sequence number, and the cell keeps
// the result of each proposer's recent writes, so a write sent again
// (because its first copy may have been lost on the network, or by a
// leader that lost office) applies once and the caller gets its one real
// result. The library sends again on its own, so a call waits until its
// write has applied, or its context ends. Only then, with the outcome
// still unknown, does it return an *AmbiguousError (errors.Is
// ErrAmbiguous), whose ID Outcome takes to settle what happened.

// WriteID names one write for Outcome. The zero WriteID names none. It
// marshals as text, so a caller may keep it (in a log, a database) and
// ask after it from another process of the same identity.
type WriteID struct {
	p command.Proposer
}

// IsZero reports whether id names no write.
func (id WriteID) IsZero() bool { return id.p == (command.Proposer{}) }

// String returns id's text form.
func (id WriteID) String() string {
	b, _ := id.MarshalText()
	return string(b)
}

// writeIDText is the version of WriteID's text form.
const writeIDText = "w1"

// MarshalText encodes id as "w1:" then the owner (hex), proposer, sequence
// and birth index, and the idempotency key (hex), colon-separated.
func (id WriteID) MarshalText() ([]byte, error) {
	p := id.p
	return []byte(strings.Join([]string{writeIDText, hex.EncodeToString([]byte(p.Owner)),
		strconv.FormatUint(p.ID, 16), strconv.FormatUint(p.Seq, 10), strconv.FormatUint(p.Born, 10),
		hex.EncodeToString([]byte(p.Key))}, ":")), nil
}

// UnmarshalText decodes what MarshalText wrote; anything else is
// ErrInvalidArgument.
func (id *WriteID) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), ":")
	bad := func() error { return fmt.Errorf("%w: write ID %q", ErrInvalidArgument, b) }
	if len(parts) != 6 || parts[0] != writeIDText {
		return bad()
	}
	owner, err1 := hex.DecodeString(parts[1])
	pid, err2 := strconv.ParseUint(parts[2], 16, 64)
	seq, err3 := strconv.ParseUint(parts[3], 10, 64)
	born, err4 := strconv.ParseUint(parts[4], 10, 64)
	key, err5 := hex.DecodeString(parts[5])
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || len(owner) > maxClientIdentity+len(clientOwnerPrefix) ||
		len(key) > maxIdempotencyKey || (len(key) == 0) == (seq == 0) {
		return bad()
	}
	id.p = command.Proposer{Owner: string(owner), ID: pid, Seq: seq, Born: born, Key: string(key)}
	return nil
}

// AmbiguousError is the error of a write whose call ended (its context
// did, or the member closed) before the write was seen to apply: it may
// have applied, or may still. errors.Is(err, ErrAmbiguous) holds, and so
// does errors.Is(err, cause) for the context's error. Outcome(ID) says
// what became of it.
type AmbiguousError struct {
	ID  WriteID
	Err error
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%v (write %v): %v", ErrAmbiguous, e.ID, e.Err)
}

// Unwrap returns ErrAmbiguous and the cause.
func (e *AmbiguousError) Unwrap() []error { return []error{ErrAmbiguous, e.Err} }

// ambiguous maps raftnode's ambiguous error to the backends' (spi's).
func ambiguous(err error) error {
	var amb *raftnode.AmbiguousError
	if errors.As(err, &amb) {
		p := amb.Proposer
		p.Floor = 0 // the proposer's, not the write's
		return &spi.AmbiguousError{Proposer: p, Err: amb.Err}
	}
	return err
}

// ambiguousOf is a backend's ambiguous error as the package's own: the
// one place a user's *AmbiguousError is made.
func ambiguousOf(err error) error {
	var amb *spi.AmbiguousError
	if errors.As(err, &amb) {
		return &AmbiguousError{ID: WriteID{p: amb.Proposer}, Err: amb.Err}
	}
	return err
}

// Outcome is what became of a write.
type Outcome struct {
	// Applied reports whether the cell carried the write out (its
	// condition held or not, see Succeeded and Err). False means it never
	// applied and, from this answer on, never will.
	Applied bool
	// Rev is the cell revision after the write applied.
	Rev int64
	// Succeeded, for a conditional write (IfVersion, a Txn's If),
	// reports whether its condition held; true for an unconditional one.
	Succeeded bool
	// Err, when the write applied but changed nothing for a reason of its
	// own (ErrQuotaExceeded, ErrSessionExpired), is that reason.
	Err error
}

// Outcome settles what became of the write id names (from an
// *AmbiguousError): whether it applied and with what result, or, if it
// has not applied by the time this call's request reaches the log, that
// it never will (a copy still in flight then changes nothing). It is
// itself a write, so it needs a quorum, and it is safe to repeat.
// ErrRetired means the cell no longer knows: the write's record was
// retired (ARCHITECTURE.md, "Exactly-once writes").
//
// Through a Client it settles a write of this client, or of another
// client of the same identity.
func (c *cellOps) Outcome(ctx context.Context, id WriteID) (Outcome, error) {
	return settleOutcome(ctx, c, id)
}

func settleOutcome(ctx context.Context, b *cellOps, id WriteID) (Outcome, error) {
	if id.IsZero() {
		return Outcome{}, fmt.Errorf("%w: zero write ID", ErrInvalidArgument)
	}
	p := id.p
	res, err := b.propose(ctx, &command.Command{Kind: command.KindResolve, Proposer: &p})
	switch {
	case res.Status == command.StatusNotApplied:
		return Outcome{}, nil
	case errors.Is(err, ErrRetired):
		return Outcome{}, err
	case err != nil && res.Status == command.StatusOK:
		return Outcome{}, err
	}
	return Outcome{Applied: true, Rev: res.Rev, Succeeded: res.Succeeded || res.Ops == nil, Err: err}, nil
}

// maxIdempotencyKey bounds an idempotency key, in bytes.
const maxIdempotencyKey = 256

// IdempotencyKey makes the write exactly-once under key, a name the
// caller chooses for it (a job's ID, a request's): however often the
// write is submitted under that key by this identity, from this process
// or another, it applies once, and every submission gets the first one's
// result. The cell keeps a key's record while this identity keeps writing
// (ARCHITECTURE.md, "Exactly-once writes", for the bounds). At most 256
// bytes; empty means none.
func IdempotencyKey(key string) WriteOption {
	return func(o *writeOptions) { o.idemKey = key }
}

// proposerFor returns the proposer a write's options ask for, nil for the
// backend's own.
func (o *writeOptions) proposerFor() (*command.Proposer, error) {
	if o.idemKey == "" {
		return nil, nil
	}
	if len(o.idemKey) > maxIdempotencyKey {
		return nil, fmt.Errorf("%w: idempotency key of %d bytes (at most %d)", ErrInvalidArgument, len(o.idemKey), maxIdempotencyKey)
	}
	return &command.Proposer{Key: o.idemKey}, nil
}
