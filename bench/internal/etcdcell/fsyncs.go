package etcdcell

import "github.com/prometheus/client_golang/prometheus"

// walFsyncMetric is etcd's histogram of WAL fsyncs. etcd registers it
// once per process on the default registry, so it counts the fsyncs of
// all three members together.
const walFsyncMetric = "etcd_disk_wal_fsync_duration_seconds"

// LogFsyncs returns the WAL fsyncs of all members in this process (etcd
// counts them together, so the leader's share is unknown: 0). It does
// not count etcd's other fsyncs (the bbolt backend commits, every 100ms
// or so).
func (c *Cell) LogFsyncs() (all, leader uint64) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != walFsyncMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			all += m.GetHistogram().GetSampleCount()
		}
	}
	return all, 0
}
