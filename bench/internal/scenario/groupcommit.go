package scenario

import "github.com/coordcell/coord/bench/internal/cell"

// groupCommit is a cell's fsync counts at the start of a load point.
type groupCommit struct {
	syncs, entries [cell.Members]uint64
}

// startGroupCommit records the cell's fsync counts, when it keeps them.
func startGroupCommit(c cell.Cell) groupCommit {
	var g groupCommit
	if ls, ok := c.(cell.LogSyncer); ok {
		g.syncs, g.entries = ls.LogSyncs()
	}
	return g
}

// metrics returns the log entries made durable per fsync since the
// start, on the leader and on the followers (together), for a cell that
// counts them; nothing otherwise.
func (g groupCommit) metrics(c cell.Cell, name, label string) []Metric {
	ls, ok := c.(cell.LogSyncer)
	if !ok {
		return nil
	}
	syncs, entries := ls.LogSyncs()
	lead := c.Leader()
	var ls0, le0, fs, fe uint64
	for m := range cell.Members {
		s, e := syncs[m]-g.syncs[m], entries[m]-g.entries[m]
		if m == lead {
			ls0, le0 = s, e
		} else {
			fs, fe = fs+s, fe+e
		}
	}
	per := func(e, s uint64) float64 {
		if s == 0 {
			return 0
		}
		return float64(e) / float64(s)
	}
	return []Metric{
		{Name: name + ".leader_group_commit", Label: label + ": leader log entries per fsync", Unit: "entries", Value: per(le0, ls0)},
		{Name: name + ".follower_group_commit", Label: label + ": follower log entries per fsync", Unit: "entries", Value: per(fe, fs)},
	}
}
