package scenario

import "testing"

// The etcd-* scenarios run through clientv3 on both sides: coord behind
// etcdapi, and etcd. Every point is reported on both, with the fsyncs of
// the puts counted in-process as in the put scenario.
func TestEtcdPut(t *testing.T) {
	got := run(t, scenarioNamed(t, "etcd-put"), tiny())
	positive(t, got, "etcd-put.c1.rate", "etcd-put.c1.p50", "etcd-put.c4.rate", "etcd-put.c4.p99",
		"etcd-put.c4.cpu_us", "etcd-put.c4.fsyncs")
	for side, ms := range got {
		if n := ms["etcd-put.c1.errors"] + ms["etcd-put.c4.errors"]; n != 0 {
			t.Errorf("%s: %v puts failed", side, n)
		}
	}
}

func TestEtcdGet(t *testing.T) {
	got := run(t, scenarioNamed(t, "etcd-get"), tiny())
	positive(t, got, "etcd-get.linearizable.rate", "etcd-get.linearizable.p99", "etcd-get.serializable.rate")
}

// Locks through etcd's v3lock service, with clientv3 spreading its calls
// over the members (a lease granted on one member, Lock and Unlock on
// the others: coord's front takes the session over), then with each
// client on one member.
func TestEtcdLock(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		name := "spread"
		if pinned {
			name = "pinned"
		}
		t.Run(name, func(t *testing.T) {
			cfg := tiny()
			cfg.EtcdPinned = pinned
			got := run(t, scenarioNamed(t, "etcd-lock"), cfg)
			positive(t, got, "etcd-lock.contended.rate", "etcd-lock.contended.p50", "etcd-lock.uncontended.rate")
		})
	}
}
