package scenario

import "testing"

// Sessions on clients are kept alive without a log entry, with about one
// keep-alive per client per interval (not one per session: each client
// has 20), folded by the members into their own batches to the leader;
// and the counters see that traffic on both links.
func TestClientsSessions(t *testing.T) {
	got := run(t, scenarioNamed(t, "clients-sessions"), tiny())
	if _, ok := got["etcd"]; ok {
		t.Error("clients-sessions ran on etcd")
	}
	zero(t, got, "clients-sessions.log_entries", "clients-sessions.expired", "clients-sessions.not_created")
	positive(t, got, "clients-sessions.create_rate", "clients-sessions.leader_keepalives", "clients-sessions.leader_acks",
		"clients-sessions.client_keepalives", "clients-sessions.client_frames", "clients-sessions.member_frames",
		"clients-sessions.leader.peer_frames", "clients-sessions.follower1.client_frames")
	ms := got["coord"]
	// Generous bounds (a loaded machine adds early batches and retries),
	// far below one message per session.
	if v := ms["clients-sessions.client_keepalives_max"]; v >= 5 {
		t.Errorf("a client sent %.2f keep-alives per interval for its 20 sessions", v)
	}
	if v := ms["clients-sessions.leader_keepalives"]; v >= 5 {
		t.Errorf("the leader got %.2f keep-alives per follower per interval", v)
	}
}

// A change reaches each client once, whatever the watchers behind it.
func TestClientsWatch(t *testing.T) {
	cfg := tiny()
	got := run(t, scenarioNamed(t, "clients-watch"), cfg)
	positive(t, got, "clients-watch.all.p50", "clients-watch.all.p99", "clients-watch.each.p50", "clients-watch.event_bytes")
	if v := got["coord"]["clients-watch.event_frames"]; v != float64(cfg.Clients) {
		t.Errorf("%v event frames per change for %d clients of %d watchers each, want %d",
			v, cfg.Clients, cfg.ClientWatchers, cfg.Clients)
	}
}

func TestClientPut(t *testing.T) {
	got := run(t, scenarioNamed(t, "client-put"), tiny())
	positive(t, got, "client-put.c2.rate", "client-put.c2.p99", "client-put.inproc.c2.rate")
}

func TestClientGet(t *testing.T) {
	got := run(t, scenarioNamed(t, "client-get"), tiny())
	positive(t, got, "client-get.linearizable.rate", "client-get.linearizable.p99")
}

func TestClientLock(t *testing.T) {
	got := run(t, scenarioNamed(t, "client-lock"), tiny())
	positive(t, got, "client-lock.contended.rate", "client-lock.contended.p50", "client-lock.uncontended.rate")
}
