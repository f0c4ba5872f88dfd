// Package sim explores a coord cell's histories in virtual time: whole
// five-member cells, their clients and their recipes run inside a
// testing/synctest bubble, where timers and sleeps advance only when
// every goroutine of the cell waits, so thirty seconds of elections,
// partitions and crashes take about a second of the machine's time. Each
// history is drawn from a seed: a fault schedule (isolations,
// partitions, crashes and restarts, pauses, message loss and delay, cut
// clients, members added and removed, one member's disk failing every
// write with an I/O error or a full disk) over a workload (puts, compare-and-sets and reads on a few
// keys through members and clients, fenced lock holds, a watch through
// a client), then checkers over what was recorded.
//
// Safety, over every history: the key-value history of members and
// clients together is linearizable; no write ends ErrAmbiguous while its
// caller's context and its member live (writes are exactly-once and
// resent); the fence never admits two holds under one token, nor a token
// after a higher one; the client's watch delivers every acknowledged put
// after its start once, in revision order, across its failovers.
// A member whose disk fails stops with ErrInternal at its next write
// and, crashed on what it had synced and restarted, acknowledged nothing
// the checks above find lost; after the heal, the cell lists exactly
// the members the history added and did not remove.
// Liveness, once the last fault has healed: the cell elects a leader,
// every member and client completes a write, the watch catches up, each
// client's fresh session outlives a crash of the leader, and a removed
// member stops by itself; each within a stated bound of virtual time.
//
// It is tests only:
//
//	go test ./sim/                      # the default histories
//	go test ./sim/ -seeds 1000          # more of them
//	go test ./sim/ -seed 42 -v          # replay one history, with its trace
//	go test ./sim/ -seeds 20 -seedbase 7000  # the same 20 histories each run
//
// Members are added whatever the other faults: down, paused or cut-off
// members miss the addition and must learn the new member from it
// (issue 25, raftnode/strangers.go). -addwhenready adds them only while
// every member runs and hears the others, the schedule of the histories
// before that fix, to replay their seeds.
//
// A history's faults run for its virtual length and until at least ten
// have been injected (a member's join can take several seconds of it);
// the workload runs as long as the faults do.
//
// A failing history prints its seed and the command that replays it.
// Virtual time makes every timer, timeout and fault the seed draws
// happen at the same virtual instants on a replay; the order in which
// goroutines run between those instants is the Go scheduler's, so a
// replay explores the same schedule of faults and calls, not the same
// interleaving to the instruction.
package sim
