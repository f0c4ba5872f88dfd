package autopilot

import (
	"fmt"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/testmain"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testmain.Run(m) }

var t0 = time.Unix(1000, 0)

// cell builds servers: the first voters are voters (server 0 leads), the
// rest learners, zones assigned round-robin from zones.
func cell(voters, learners int, zones ...string) []Server {
	var out []Server
	for i := range voters + learners {
		s := Server{ID: uint64(i + 1), Name: fmt.Sprintf("s%d", i), MayVote: true, InConfig: true,
			Voter: i < voters, Leader: i == 0, Health: Alive, HealthSince: t0, Match: 100}
		if len(zones) > 0 {
			s.Zone = zones[i%len(zones)]
		}
		out = append(out, s)
	}
	return out
}

// run applies decisions until None (at most 20), refreshing contact at
// each step; it returns the decisions taken.
func run(a *Autopilot, servers []Server, now time.Time) ([]Decision, []Server) {
	var ds []Decision
	for range 20 {
		for i := range servers {
			if servers[i].Health == Alive {
				servers[i].LastContact = now
			}
		}
		d := a.Decide(servers, 100, now)
		if d.Action == None {
			return ds, servers
		}
		ds = append(ds, d)
		for i := range servers {
			if servers[i].ID != d.Server.ID {
				continue
			}
			switch d.Action {
			case Promote:
				servers[i].Voter = true
			case Demote:
				servers[i].Voter = false
			case AddLearner:
				servers[i].InConfig = true
			case Remove:
				servers = append(servers[:i], servers[i+1:]...)
			}
			break
		}
	}
	panic("autopilot did not settle")
}

func zoneCounts(servers []Server) map[string]int {
	m := map[string]int{}
	for _, s := range servers {
		if s.Voter {
			m[s.Zone]++
		}
	}
	return m
}

func TestPromotesOnlyAfterStabilization(t *testing.T) {
	a := New(Config{Stabilization: 10 * time.Second})
	servers := cell(1, 2)
	ds, _ := run(a, servers, t0)
	require.Empty(t, ds, "nothing is promoted before it has been healthy for the stabilization time")
	ds, servers = run(a, servers, t0.Add(9*time.Second))
	require.Empty(t, ds)
	ds, servers = run(a, servers, t0.Add(10*time.Second))
	require.Len(t, ds, 2)
	require.Equal(t, Promote, ds[0].Action)
	require.Equal(t, 3, len(zoneCounts(servers))+2, "three voters")
}

func TestFiveVotersOverThreeZones(t *testing.T) {
	a := New(Config{Stabilization: time.Second})
	servers := cell(1, 8, "a", "b", "c")
	run(a, servers, t0)
	_, servers = run(a, servers, t0.Add(2*time.Second))
	counts := zoneCounts(servers)
	require.Equal(t, 5, counts["a"]+counts["b"]+counts["c"], "5 voters when at least 5 may vote")
	for z, n := range counts {
		require.LessOrEqual(t, n, 2, "zone %s holds %d of 5 voters", z, n)
	}
}

func TestCrowdedZoneRebalanced(t *testing.T) {
	a := New(Config{Stabilization: time.Second, Voters: 3})
	servers := cell(3, 3, "a") // all voters in zone a
	servers[3].Zone, servers[4].Zone, servers[5].Zone = "b", "c", "c"
	run(a, servers, t0)
	_, servers = run(a, servers, t0.Add(2*time.Second))
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, zoneCounts(servers))
}

func TestDeadVoterReplacedThenRemoved(t *testing.T) {
	a := New(Config{Stabilization: time.Second, DeadThreshold: 5 * time.Second})
	servers := cell(3, 1)
	run(a, servers, t0)
	run(a, servers, t0.Add(2*time.Second)) // the learner is stable now; 3 voters already
	servers[2].Health, servers[2].HealthSince = Failed, t0.Add(2*time.Second)
	servers[2].LastContact = t0.Add(2 * time.Second)
	ds, _ := run(a, servers, t0.Add(6*time.Second))
	require.Empty(t, ds, "not before the dead threshold")
	ds, servers = run(a, servers, t0.Add(8*time.Second))
	require.Len(t, ds, 2, "%+v", ds)
	require.Equal(t, Promote, ds[0].Action)
	require.Equal(t, "s3", ds[0].Server.Name)
	require.Equal(t, Remove, ds[1].Action)
	require.Equal(t, "s2", ds[1].Server.Name)
	require.Len(t, servers, 3)
}

func TestFlappingNotChurned(t *testing.T) {
	a := New(Config{Stabilization: time.Second, DeadThreshold: 5 * time.Second})
	servers := cell(3, 1)
	now := t0
	for i := range 40 {
		now = now.Add(time.Second)
		if i%3 == 0 {
			servers[1].Health, servers[1].HealthSince = Failed, now
		} else if servers[1].Health == Failed {
			servers[1].Health, servers[1].HealthSince = Alive, now
		}
		ds, s := run(a, servers, now)
		servers = s
		for _, d := range ds {
			require.NotEqual(t, Remove, d.Action, "a flapping voter is never removed")
			require.NotEqual(t, "s1", d.Server.Name)
		}
	}
}

func TestNeverBreaksQuorum(t *testing.T) {
	a := New(Config{Stabilization: time.Second, DeadThreshold: time.Second, Voters: 3})
	servers := cell(5, 0)
	for _, i := range []int{2, 3, 4} { // three of five voters dead: the leader has no quorum left to lose
		servers[i].Health, servers[i].HealthSince = Failed, t0
	}
	ds, _ := run(a, servers, t0.Add(time.Hour))
	for _, d := range ds {
		require.NotEqual(t, Remove, d.Action, "removing a voter from 5 with 2 healthy would leave no quorum: %+v", d)
		require.NotEqual(t, Demote, d.Action)
	}
}

func TestLeftRemovedAtOnceAndNewcomersAdded(t *testing.T) {
	a := New(Config{Stabilization: time.Second})
	servers := cell(3, 1)
	servers[3].Health = Left
	servers = append(servers, Server{ID: 99, Name: "new", MayVote: true, Health: Alive, HealthSince: t0})
	ds, servers := run(a, servers, t0)
	require.Equal(t, Remove, ds[0].Action)
	require.Equal(t, AddLearner, ds[1].Action)
	require.Len(t, servers, 4)
}

// TestSuspectNeitherPromotedNorReplaced: a suspect voter, however long
// suspect, is not replaced; a suspect standby is not promoted until it has
// been alive for the stabilization time again.
func TestSuspectNeitherPromotedNorReplaced(t *testing.T) {
	a := New(Config{Stabilization: time.Second, DeadThreshold: time.Second, Voters: 3})
	servers := cell(2, 1) // 2 voters: the standby is wanted
	servers[1].Health, servers[1].HealthSince = Suspect, t0
	servers[2].Health, servers[2].HealthSince = Suspect, t0
	now := t0.Add(time.Hour)
	ds, servers := run(a, servers, now)
	require.Empty(t, ds, "nothing is done to suspect members: %+v", ds)

	servers[2].Health, servers[2].HealthSince = Alive, now
	ds, _ = run(a, servers, now.Add(time.Second/2))
	require.Empty(t, ds, "alive again, but not yet for the stabilization time: %+v", ds)
	ds, _ = run(a, servers, now.Add(2*time.Second))
	require.Len(t, ds, 1, "%+v", ds)
	require.Equal(t, Promote, ds[0].Action)
	require.Equal(t, "s2", ds[0].Server.Name)
}
