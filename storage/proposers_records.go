package storage

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/wirebytes"
)

// The proposer table's records (under prefixProposer):
//
//	'h'                  the retirement horizon
//	'p' ref              a proposer's floor and last index (proposerFormat1)
//	'r' ref seq(8 BE)    one kept result
//
// A result record of resultFormat2 also carries its proposer's floor and
// last active index as of its writing, so that a command writes one
// record, not a result and a proposer record: a proposer's floor and last
// index are the highest any of its records says (both only grow, and its
// newest record, which says the current ones, is never deleted before a
// newer one is written). A proposer record is written only when the
// newest result is not (it was forgotten as soon as it was kept). It also
// stores a put's result, the common one, in a short form (opPut).
//
// A result forgotten below its proposer's floor is not deleted one by
// one: the floor implies it (a record below the floor is skipped when
// the table is loaded), and the records below are deleted a
// floorChunk-aligned range at a time as the floor passes chunk bounds,
// the way the history is pruned (apply.go): one range deletion instead
// of a point tombstone per command carried down Pebble's levels. The
// exceptions are deleted explicitly when forgotten (resultExplicit): a
// result kept although it is below the floor (a command whose floor
// passed its own sequence), and every record of resultFormat1, whose
// writers deleted each result on its own.
//
// A result's size, which the table's byte bounds count, is its
// resultFormat1 length whatever format stores it, so that builds of
// either format make the same decisions in one cell.

// Record formats of the table.
const (
	proposerFormat1 byte = 1 // floor, last active index
	resultFormat1   byte = 1 // one command's result (earlier builds)
	resultFormat2   byte = 2 // one command's result, its proposer's floor and last index
	resultFormat3   byte = 3 // resultFormat2 with nested transactions' results (opNested)
	horizonFormat1  byte = 1 // the retirement horizon
)

// floorChunk is the alignment of the ranges of forgotten results deleted
// at once. A proposer leaves fewer than this many forgotten records
// behind (until its next range, or its retirement), but while a result
// kept below its floor, which its next floor move forgets, holds the
// range back.
const floorChunk = 64

// Second bytes of the table's keys, after prefixProposer.
const (
	tagHorizon  = 'h'
	tagProposer = 'p'
	tagResult   = 'r'
	refByID     = 'i'
	refByKey    = 'k'
)

// Keys.

func appendRefBody(dst []byte, r proposerRef) []byte {
	dst = wirebytes.AppendString(dst, r.owner)
	if r.key != "" {
		return wirebytes.AppendString(append(dst, refByKey), r.key)
	}
	return appendUint64(append(dst, refByID), r.id)
}

func appendProposerKey(dst []byte, r proposerRef) []byte {
	return appendRefBody(append(dst, prefixProposer, tagProposer), r)
}

// appendResultsKey appends the prefix of r's result keys. A ref's body is
// prefix-free (its strings are length-prefixed, its ID fixed-size), so
// this prefix holds r's results and nothing else.
func appendResultsKey(dst []byte, r proposerRef) []byte {
	return appendRefBody(append(dst, prefixProposer, tagResult), r)
}

func appendResultKey(dst []byte, r proposerRef, seq uint64) []byte {
	return appendUint64(appendResultsKey(dst, r), seq)
}

var horizonKey = []byte{prefixProposer, tagHorizon}

// readRefBody parses what appendRefBody wrote, leaving r at the rest.
func readRefBody(r *wirebytes.Reader) proposerRef {
	var ref proposerRef
	ref.owner = r.Str()
	switch tag := r.U8(); tag {
	case refByKey:
		if ref.key = r.Str(); ref.key == "" {
			r.Fail("empty idempotency key")
		}
	case refByID:
		b := r.Take(8)
		if len(b) == 8 {
			ref.id = readUint64(b)
		}
	default:
		r.Fail("proposer tag %#x", tag)
	}
	return ref
}

// Records.

func appendProposerRecord(dst []byte, it *proposerItem) []byte {
	dst = append(dst, proposerFormat1)
	dst = binary.AppendUvarint(dst, it.floor)
	return binary.AppendUvarint(dst, it.last)
}

func appendHorizonRecord(dst []byte, h uint64) []byte {
	return binary.AppendUvarint(append(dst, horizonFormat1), h)
}

// Result record flags.
const (
	resultSucceeded = 1 << 0
	resultTrimmed   = 1 << 1
	resultExplicit  = 1 << 2 // resultFormat2: deleted when forgotten, not implied by the floor
)

// resultMeta is what a result record says besides the result.
type resultMeta struct {
	// floor and last are the proposer's as of the record (resultFormat2;
	// 0 in resultFormat1's).
	floor, last uint64
	explicit    bool
}

// How an op result is stored in a resultFormat2 record: in full, or as a
// put's (one key, no value, written at the result's revision), which is
// what most results hold.
const (
	opStored byte = 0 // deleted, then the KVs as resultFormat1 has them
	opPut    byte = 1 // key, version, revision - create revision, session
	// opNested is a nested transaction's result (resultFormat3 only):
	// succeeded (0 or 1), the op count, then each op's as at the top.
	opNested byte = 2
)

// appendResultRecord appends the stored form (resultFormat2) of res, the
// result of sequence seq of a proposer whose floor and last index are
// now m's. The floor goes as its distance below seq (wrapping), small
// for a proposer whose floor trails its calls.
//
// A result with a nested transaction's (opNested) is written in
// resultFormat3, every other as before, so a build before nested
// transactions refuses (ErrFormat) only the records it could not read.
func appendResultRecord(dst []byte, res *command.Result, seq uint64, m resultMeta) []byte {
	format := resultFormat2
	if slices.ContainsFunc(res.Ops, func(op command.OpResult) bool { return op.Txn != nil }) {
		format = resultFormat3
	}
	dst = append(dst, format, byte(res.Status), resultFlags(res, m.explicit))
	dst = binary.AppendVarint(dst, int64(seq-m.floor))
	dst = binary.AppendUvarint(dst, m.last)
	dst = binary.AppendVarint(dst, res.Rev)
	dst = binary.AppendVarint(dst, res.SessionID)
	return appendStoredOps(dst, res.Ops, res.Rev)
}

// appendStoredOps appends the op results of a resultFormat2 or 3 record.
func appendStoredOps(dst []byte, ops []command.OpResult, rev int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		if n := op.Txn; n != nil {
			var ok byte
			if n.Succeeded {
				ok = 1
			}
			dst = appendStoredOps(append(dst, opNested, ok), n.Ops, rev)
			continue
		}
		if isPutResult(op, rev) {
			kv := &op.KVs[0]
			dst = wirebytes.AppendString(append(dst, opPut), kv.Key)
			dst = binary.AppendVarint(dst, kv.Version)
			dst = binary.AppendVarint(dst, rev-kv.CreateRev)
			dst = binary.AppendVarint(dst, kv.Session)
			continue
		}
		dst = appendOpResult(append(dst, opStored), op)
	}
	return dst
}

// isPutResult reports whether op stores as opPut: a put's result, as the
// table keeps it (its value dropped), or anything that looks the same.
func isPutResult(op *command.OpResult, rev int64) bool {
	return op.Deleted == 0 && len(op.KVs) == 1 && op.KVs[0].Value == nil && op.KVs[0].ModRev == rev
}

func resultFlags(res *command.Result, explicit bool) byte {
	var flags byte
	if res.Succeeded {
		flags |= resultSucceeded
	}
	if res.Trimmed {
		flags |= resultTrimmed
	}
	if explicit {
		flags |= resultExplicit
	}
	return flags
}

// appendResultBody appends what a resultFormat1 record stores after its
// flags.
func appendResultBody(dst []byte, res *command.Result) []byte {
	dst = binary.AppendVarint(dst, res.Rev)
	dst = binary.AppendVarint(dst, res.SessionID)
	dst = binary.AppendUvarint(dst, uint64(len(res.Ops)))
	for i := range res.Ops {
		dst = appendOpResult(dst, &res.Ops[i])
	}
	return dst
}

func appendOpResult(dst []byte, op *command.OpResult) []byte {
	dst = binary.AppendVarint(dst, op.Deleted)
	dst = binary.AppendUvarint(dst, uint64(len(op.KVs)))
	for j := range op.KVs {
		kv := &op.KVs[j]
		dst = wirebytes.AppendString(dst, kv.Key)
		dst = wirebytes.AppendBytes(dst, kv.Value)
		dst = binary.AppendVarint(dst, kv.Version)
		dst = binary.AppendVarint(dst, kv.CreateRev)
		dst = binary.AppendVarint(dst, kv.ModRev)
		dst = binary.AppendVarint(dst, kv.Session)
	}
	return dst
}

// resultSize is the length of res's resultFormat1 record: format,
// status and flags bytes, then appendResultBody's. A nested
// transaction's result, which format 1 cannot hold, counts as an op
// result with no keys followed by its succeeded byte and its own op
// results (part of format 7's meaning: never change it).
func resultSize(res *command.Result) int64 {
	return 3 + int64(wirebytes.VarintLen(res.Rev)+wirebytes.VarintLen(res.SessionID)) + opResultsSize(res.Ops)
}

func opResultsSize(ops []command.OpResult) int64 {
	n := wirebytes.UvarintLen(uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		if op.Txn != nil {
			n += 3 + int(opResultsSize(op.Txn.Ops))
			continue
		}
		n += wirebytes.VarintLen(op.Deleted) + wirebytes.UvarintLen(uint64(len(op.KVs)))
		for j := range op.KVs {
			kv := &op.KVs[j]
			n += wirebytes.StringLen(kv.Key) + wirebytes.BytesLen(kv.Value) + wirebytes.VarintLen(kv.Version) +
				wirebytes.VarintLen(kv.CreateRev) + wirebytes.VarintLen(kv.ModRev) + wirebytes.VarintLen(kv.Session)
		}
	}
	return int64(n)
}

// The fewest bytes an op result (either format's) and a KV take in a
// result record.
const minOpResult, minResultKV = 2, 6

// decodeResultRecord decodes a result record of either format, kept
// under sequence seq. A resultFormat1 record is explicit: its writers
// deleted it when they forgot it, whatever the floor.
func decodeResultRecord(b []byte, seq uint64) (*command.Result, resultMeta, error) {
	var m resultMeta
	if len(b) == 0 {
		return nil, m, fmt.Errorf("%w: empty result record", ErrCorrupt)
	}
	format := b[0]
	if format != resultFormat1 && format != resultFormat2 && format != resultFormat3 {
		return nil, m, fmt.Errorf("%w: result record format %d, want %d to %d", ErrFormat, format, resultFormat1, resultFormat3)
	}
	r := wirebytes.NewReader(b[1:], ErrCorrupt)
	res := &command.Result{Status: command.Status(r.U8())}
	flags := r.U8()
	known := byte(resultSucceeded | resultTrimmed)
	if format != resultFormat1 {
		known |= resultExplicit
	}
	if flags&^known != 0 {
		r.Fail("result flags %#x", flags)
	}
	res.Succeeded, res.Trimmed = flags&resultSucceeded != 0, flags&resultTrimmed != 0
	m.explicit = format == resultFormat1 || flags&resultExplicit != 0
	if format != resultFormat1 {
		m.floor = seq - uint64(r.Varint())
		m.last = r.Uvarint()
	}
	res.Rev = r.Varint()
	res.SessionID = r.Varint()
	if format == resultFormat1 {
		if n := r.Count(minOpResult); n > 0 {
			res.Ops = make([]command.OpResult, n)
			for i := range res.Ops {
				readOpResult(&r, &res.Ops[i])
			}
		}
	} else {
		res.Ops = readStoredOps(&r, res.Rev, format == resultFormat3, 0)
	}
	if format == resultFormat3 && !slices.ContainsFunc(res.Ops, func(op command.OpResult) bool { return op.Txn != nil }) {
		r.Fail("a result record of format %d without a nested transaction's result", format)
	}
	if err := recordDone(&r, "result"); err != nil {
		return nil, m, err
	}
	return res, m, nil
}

// readStoredOps reads the op results of a resultFormat2 or (nested) 3
// record, at depth below the top: no deeper than transactions nest.
func readStoredOps(r *wirebytes.Reader, rev int64, nested bool, depth int) []command.OpResult {
	n := r.Count(minOpResult)
	if n <= 0 {
		return nil
	}
	ops := make([]command.OpResult, n)
	for i := range ops {
		op := &ops[i]
		switch kind := r.U8(); {
		case kind == opPut:
			kv := command.KV{Key: r.Str(), Version: r.Varint(), ModRev: rev}
			kv.CreateRev = rev - r.Varint()
			kv.Session = r.Varint()
			op.KVs = []command.KV{kv}
		case kind == opStored:
			readOpResult(r, op)
		case kind == opNested && nested && depth < command.MaxNesting:
			op.Txn = &command.TxnResult{Succeeded: r.Bool()}
			op.Txn.Ops = readStoredOps(r, rev, true, depth+1)
		default:
			r.Fail("op result kind %d at depth %d", kind, depth)
		}
		if r.Err() != nil {
			return nil
		}
	}
	return ops
}

func readOpResult(r *wirebytes.Reader, op *command.OpResult) {
	op.Deleted = r.Varint()
	if k := r.Count(minResultKV); k > 0 {
		op.KVs = make([]command.KV, k)
		for j := range op.KVs {
			kv := &op.KVs[j]
			kv.Key = r.Str()
			kv.Value = r.Bytes()
			kv.Version = r.Varint()
			kv.CreateRev = r.Varint()
			kv.ModRev = r.Varint()
			kv.Session = r.Varint()
		}
	}
}

// add loads one stored record of the table into t. Once every record is
// in, settle drops the results their floors imply are forgotten.
func (t *proposerTable) add(k, val []byte) error {
	if len(k) < 2 || k[0] != prefixProposer {
		return fmt.Errorf("%w: proposer table key %x", ErrCorrupt, k)
	}
	kr := wirebytes.NewReader(k[2:], ErrCorrupt)
	switch k[1] {
	case tagHorizon:
		if len(k) != 2 {
			return fmt.Errorf("%w: horizon key %x", ErrCorrupt, k)
		}
		r, err := newRecord(val, horizonFormat1, "horizon")
		if err != nil {
			return err
		}
		t.horizon = r.Uvarint()
		return recordDone(&r, "horizon")
	case tagProposer:
		ref := readRefBody(&kr)
		if err := kr.Done(); err != nil {
			return fmt.Errorf("proposer key: %w", err)
		}
		r, err := newRecord(val, proposerFormat1, "proposer")
		if err != nil {
			return err
		}
		floor, last := r.Uvarint(), r.Uvarint()
		if err := recordDone(&r, "proposer"); err != nil {
			return err
		}
		t.merge(ref, resultMeta{floor: floor, last: last}, true)
	case tagResult:
		ref := readRefBody(&kr)
		seqb := kr.Take(8)
		if err := kr.Done(); err != nil || len(seqb) != 8 {
			return fmt.Errorf("%w: result key %x", ErrCorrupt, k)
		}
		seq := readUint64(seqb)
		res, m, err := decodeResultRecord(val, seq)
		if err != nil {
			return err
		}
		// The records of one proposer come in key order, which is
		// sequence order; a load's arrays are its own.
		it := t.merge(ref, m, false)
		it.results = append(it.results, resultItem{seq: seq, res: res, size: uint32(resultSize(res)), explicit: m.explicit})
		t.proposers.ReplaceOrInsert(it)
		t.unsettled = true
	default:
		return fmt.Errorf("%w: proposer table key %x", ErrCorrupt, k)
	}
	return nil
}

// merge takes what one record says of ref's proposer: its floor and last
// index are the highest its records say. It returns the proposer as it
// now is in t.
func (t *proposerTable) merge(ref proposerRef, m resultMeta, stored bool) proposerItem {
	it, _ := t.proposers.Get(proposerItem{proposerRef: ref})
	it.proposerRef = ref
	it.floor, it.last = max(it.floor, m.floor), max(it.last, m.last)
	it.stored = it.stored || stored
	t.proposers.ReplaceOrInsert(it)
	return it
}

// settle finishes a load: it drops the loaded results below their
// proposer's floor that are not explicit (forgotten, their records left
// for a range deletion), and counts what each proposer keeps.
func (t *proposerTable) settle() {
	if !t.unsettled {
		return
	}
	t.unsettled = false
	t.bytes, t.results = 0, 0
	var all []proposerItem
	t.proposers.Ascend(func(it proposerItem) bool {
		all = append(all, it)
		return true
	})
	for _, it := range all {
		it.results = slices.DeleteFunc(it.results, func(r resultItem) bool { return !r.explicit && r.seq < it.floor })
		it.bytes = 0
		for _, r := range it.results {
			it.bytes += int64(r.size)
		}
		t.bytes += it.bytes
		t.results += len(it.results)
		t.proposers.ReplaceOrInsert(it)
	}
}
