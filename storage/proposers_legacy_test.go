package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/coordcell/coord/internal/command"
	"github.com/stretchr/testify/require"
)

// proposers1Testdata is a state machine whose proposer table was written
// in the table's first record formats (proposerFormat1, resultFormat1),
// by that version's code: legacyProposerLog applied one entry per Apply
// with legacyProposerOpts, then closed (see its README). This build
// writes resultFormat2, so it cannot write it again.
const proposers1Testdata = "testdata/proposers1"

// legacyProposerOpts are the options the legacy log was applied with.
var legacyProposerOpts = Options{ProposerRetainEntries: 500}

// legacyProposerLog is the log of the stored legacy table: entry i+1
// carries cmds[i] (nil: an empty entry). It exercises what the table
// keeps: a member's results with a trailing floor, reads kept, a result
// kept below its proposer's floor (a command whose floor is above its
// own sequence), a resolve, idempotency keys, a client's session, and a
// retirement that leaves a horizon.
func legacyProposerLog() []*command.Command {
	var cmds []*command.Command
	at := func(c *command.Command) { cmds = append(cmds, c) }
	born := func() uint64 { return uint64(len(cmds)) } // the index before the entry
	once := func(owner string, id, seq, floor uint64, t command.Txn) *command.Command {
		c := txnCmd(t)
		c.Proposer = &command.Proposer{Owner: owner, ID: id, Seq: seq, Floor: floor, Born: born()}
		return c
	}
	put := func(k, v string) command.Txn { return command.Txn{Then: []command.Op{putOp(k, v)}} }
	keyed := func(key string, t command.Txn) *command.Command {
		c := txnCmd(t)
		c.Proposer = &command.Proposer{Owner: "client:x", Key: key, Born: born()}
		return c
	}

	at(once("", 1, 1, 1, put("a", "1")))                                                        // 1
	at(once("", 1, 2, 1, put("b", "2")))                                                        // 2
	at(once("", 1, 3, 2, command.Txn{Then: []command.Op{getOp("a"), putOp("c", "3")}}))         // 3: forgets 1
	at(once("", 2, 3, 5, put("d", "4")))                                                        // 4: kept below its floor
	at(&command.Command{Kind: command.KindResolve, Proposer: &command.Proposer{ID: 1, Seq: 5}}) // 5: never applied
	at(keyed("job-1", put("job", "run-1")))                                                     // 6
	at(once("client:bob", 9, 1, 1, put("e", "5")))                                              // 7
	bobSession := &command.Command{Kind: command.KindSessionCreate, Session: &command.Session{TTL: 5e9}}
	bobSession.Proposer = &command.Proposer{Owner: "client:bob", ID: 9, Seq: 2, Floor: 1, Born: born()}
	at(bobSession)                                                     // 8
	at(once("", 1, 4, 3, command.Txn{Then: []command.Op{delOp("b")}})) // 9: forgets 2
	at(once("", 3, 1, 1, put("f", "6")))                               // 10: retired at 1024
	for len(cmds) < 1000 {
		at(nil)
	}
	at(once("", 1, 6, 3, put("g", "7")))           // 1001
	at(once("client:bob", 9, 3, 2, put("e", "8"))) // 1002: forgets 1
	at(once("", 2, 6, 5, put("d", "9")))           // 1003
	at(keyed("job-2", put("job", "run-2")))        // 1004; job-1 retires at 1024
	for len(cmds) < 1030 {
		at(nil)
	}
	at(once("", 1, 7, 4, put("h", "10"))) // 1031: forgets 3
	return cmds
}

// legacyDisk returns an in-memory file system holding a copy of the
// legacy store where openTestSM finds it.
func legacyDisk(t *testing.T) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll(smTestDir, 0o755))
	names, err := os.ReadDir(proposers1Testdata)
	require.NoError(t, err)
	for _, n := range names {
		if n.Name() == "README" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(proposers1Testdata, n.Name()))
		require.NoError(t, err)
		f, err := fs.Create(fs.PathJoin(smTestDir, n.Name()), vfs.WriteCategoryUnspecified)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return fs
}

// TestProposerTableLegacyRecords opens the legacy store and requires the
// table this build reads from it to be the one this build makes of the
// same log (same results, same refusals, same bounds), then goes on with
// both: writes that forget and retire the legacy records, a restart, and
// a snapshot of the legacy store installed elsewhere.
func TestProposerTableLegacyRecords(t *testing.T) {
	t.Parallel()
	legacy := openTestSM(t, legacyDisk(t), legacyProposerOpts)
	fresh := openTestSM(t, nil, legacyProposerOpts)
	log := legacyProposerLog()
	for _, c := range log {
		fresh.apply(c)
	}
	require.Equal(t, fresh.AppliedIndex(), legacy.AppliedIndex())
	want := ProposerStats{Proposers: 4, Results: 9, Bytes: fresh.ProposerStats().Bytes, Horizon: 10}
	require.Equal(t, want, fresh.ProposerStats())
	require.Equal(t, want, legacy.ProposerStats())
	probes := legacyProbes()
	require.Equal(t, probeTable(fresh, probes), probeTable(legacy, probes))
	// What the legacy table holds, as this build reads it.
	for _, c := range []struct {
		p      command.Proposer
		status command.Status
	}{
		{command.Proposer{ID: 2, Seq: 3}, command.StatusOK},         // kept below the floor
		{command.Proposer{ID: 1, Seq: 5}, command.StatusNotApplied}, // resolved
		{command.Proposer{Owner: "client:bob", ID: 9, Seq: 2}, command.StatusOK},
		{command.Proposer{Owner: "client:x", Key: "job-2"}, command.StatusOK},
	} {
		res, ok := legacy.ProposerResult(&c.p)
		require.True(t, ok, "%+v", c.p)
		require.Equal(t, c.status, res.Status, "%+v", c.p)
	}
	for _, p := range []command.Proposer{{ID: 1, Seq: 3}, {ID: 3, Seq: 1}, {Owner: "client:x", Key: "job-1"}} {
		_, ok := legacy.ProposerResult(&p)
		require.False(t, ok, "%+v: forgotten or retired", p)
	}

	// Both go on alike: a repeat of each kept result, floors that forget
	// the legacy records (the one below its floor too), retirements.
	var more []*command.Command
	born := legacy.AppliedIndex()
	again := func(c *command.Command) *command.Command {
		p := *c.Proposer
		p.Born = born
		c2 := *c
		c2.Proposer = &p
		return &c2
	}
	for _, i := range []int{3, 4, 6, 7, 8, 1001, 1002, 1003, 1004} { // 1-based entries of the log
		more = append(more, again(log[i-1]))
	}
	mk := func(owner string, id, seq, floor uint64, key, value string) *command.Command {
		c := txnCmd(command.Txn{Then: []command.Op{putOp(key, value)}})
		c.Proposer = &command.Proposer{Owner: owner, ID: id, Seq: seq, Floor: floor, Born: born}
		return c
	}
	more = append(more,
		mk("", 2, 7, 7, "d", "10"),          // forgets 3 (below the floor) and 6
		mk("", 2, 3, 1, "d", "11"),          // so 3 is now refused
		mk("", 1, 8, 8, "h", "11"),          // forgets 4..7
		mk("client:bob", 9, 4, 4, "e", "9"), // forgets 2, 3
		resolveCmd(1, 9),
	)
	for len(more)+int(born) < 1600 { // past 1536: bob and job-2 retire
		more = append(more, nil)
	}
	more = append(more, mk("", 1, 10, 9, "z", "1"), mk("client:bob", 9, 5, 5, "e", "10"))
	for i, c := range more {
		require.Equal(t, fresh.apply(c).Results, legacy.apply(c).Results, "entry %d", i)
	}
	require.Equal(t, fresh.ProposerStats(), legacy.ProposerStats())
	require.Equal(t, probeTable(fresh, probes), probeTable(legacy, probes))
	legacy.reopen()
	fresh.reopen()
	require.Equal(t, fresh.ProposerStats(), legacy.ProposerStats())
	require.Equal(t, probeTable(fresh, probes), probeTable(legacy, probes))

	// A snapshot of a store that still has legacy records.
	old := openTestSM(t, legacyDisk(t), legacyProposerOpts)
	snap, err := old.snapshot()
	require.NoError(t, err)
	other := openTestSM(t, nil, legacyProposerOpts)
	transfer(t, old, other, snap)
	install(t, other, snap)
	require.Equal(t, probeTable(old, probes), probeTable(other, probes))
	require.Equal(t, old.ProposerStats(), other.ProposerStats())
}

// legacyProbes are the commands probeTable asks after: every proposer of
// the legacy log and its test, at sequence numbers around theirs.
func legacyProbes() []command.Proposer {
	var ps []command.Proposer
	for _, id := range []uint64{1, 2, 3, 9} {
		for _, owner := range []string{"", "client:bob"} {
			for seq := uint64(0); seq <= 11; seq++ {
				ps = append(ps, command.Proposer{Owner: owner, ID: id, Seq: seq, Born: 1})
				ps = append(ps, command.Proposer{Owner: owner, ID: id, Seq: seq, Born: 1 << 40})
			}
		}
	}
	for _, key := range []string{"job-1", "job-2", "job-3"} {
		ps = append(ps, command.Proposer{Owner: "client:x", Key: key, Born: 1})
	}
	return ps
}

// probeTable renders what the published table says of each of probes:
// the kept result a copy would get, or whether it would be refused or run.
func probeTable(ts *testSM, probes []command.Proposer) []string {
	a := &applier{sm: ts.StateMachine, mem: ts.view.Load().memState}
	out := make([]string, 0, len(probes))
	for i := range probes {
		p := &probes[i]
		_, kept, refused, run := a.proposerCheck(p)
		res, ok := ts.ProposerResult(p)
		if kept != nil {
			require.Equal(ts.t, *kept, res)
		}
		out = append(out, fmt.Sprintf("%+v: kept %v %+v refused %d run %v", *p, ok, res, refused, run))
	}
	return out
}
