package scenario

import "github.com/coordcell/coord/bench/internal/cell"

// fsyncs is a cell's Raft log fsync counts at the start of a load point.
type fsyncs struct {
	all, leader uint64
}

// startFsyncs records the cell's fsync counts, when it keeps them.
func startFsyncs(c cell.Cell) fsyncs {
	var f fsyncs
	if fc, ok := c.(cell.Fsyncer); ok {
		f.all, f.leader = fc.LogFsyncs()
	}
	return f
}

// metrics returns the Raft log fsyncs per write since the start, of all
// members together and, when the cell tells, of the leader (whose
// inverse is its group-commit factor); nothing for a cell that does not
// count them. writes is the number of writes in the window.
func (f fsyncs) metrics(c cell.Cell, writes int, name, label string) []Metric {
	fc, ok := c.(cell.Fsyncer)
	if !ok || writes == 0 {
		return nil
	}
	all, leader := fc.LogFsyncs()
	out := []Metric{{Name: name + ".fsyncs", Label: label + ": log fsyncs per put, 3 members",
		Unit: "fsyncs", Value: float64(all-f.all) / float64(writes)}}
	if leader > 0 && leader >= f.leader {
		out = append(out, Metric{Name: name + ".leader_fsyncs", Label: label + ": leader log fsyncs per put",
			Unit: "fsyncs", Value: float64(leader-f.leader) / float64(writes)})
	}
	return out
}
