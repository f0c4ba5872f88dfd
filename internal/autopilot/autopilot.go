// Package autopilot decides, one change at a time, how the Raft leader
// should reshape the cell's membership from what gossip and Raft say:
// add new members as learners, promote caught-up learners that stayed
// healthy for a stabilization time up to a target voter count spread
// over zones, replace dead voters, and remove members that left. It
// decides only; the caller carries the change out and asks again.
package autopilot

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Health is a member's state as gossip sees it.
type Health string

// The gossip states autopilot tells apart.
const (
	Alive Health = "alive"
	// Suspect is alive to gossip but for an unanswered probe: not
	// healthy (no promotion; stabilization starts again once alive), not
	// dead (never replaced for it).
	Suspect Health = "suspect"
	Failed  Health = "failed"
	Left    Health = "left"
	Unknown Health = "unknown" // not (or no longer) in gossip
)

// Server is one member, in the Raft configuration or only in gossip.
type Server struct {
	ID          uint64
	Name        string
	Addr        string // Raft transport address
	Zone        string
	MayVote     bool
	InConfig    bool // in the Raft configuration
	Voter       bool // a voter there
	Leader      bool
	Health      Health
	HealthSince time.Time // since when gossip has said Health
	LastContact time.Time // last time Raft heard from it; zero = never
	Match       uint64    // highest log index known replicated on it
}

// Config holds the knobs, with Consul's defaults where Consul has one.
type Config struct {
	// Voters is the target voter count; 0 = 3, or 5 when at least 5
	// members may vote.
	Voters int
	// Stabilization is how long a learner must stay healthy before it is
	// promoted. Default 10s.
	Stabilization time.Duration
	// DeadThreshold is how long a member must have been failed in gossip
	// and unheard by Raft before it is replaced. Default 10s.
	DeadThreshold time.Duration
	// ContactThreshold is how recently Raft must have heard from a
	// member for it to be healthy. Default 1s.
	ContactThreshold time.Duration
	// CatchUp is how many entries behind the leader a healthy member may
	// be. Default 250 (Consul's MaxTrailingLogs).
	CatchUp uint64
}

// Defaults fills zero fields with the defaults.
func (c *Config) Defaults() {
	if c.Stabilization == 0 {
		c.Stabilization = 10 * time.Second
	}
	if c.DeadThreshold == 0 {
		c.DeadThreshold = 10 * time.Second
	}
	if c.ContactThreshold == 0 {
		c.ContactThreshold = time.Second
	}
	if c.CatchUp == 0 {
		c.CatchUp = 250
	}
}

// Action is a membership change.
type Action string

// The changes autopilot asks for.
const (
	None       Action = "none"
	AddLearner Action = "add-learner"
	Promote    Action = "promote"
	Demote     Action = "demote" // a voter becomes a learner (standby)
	Remove     Action = "remove"
)

// Decision is one change, and why.
type Decision struct {
	Action Action
	Server Server
	Reason string
	At     time.Time
}

// Autopilot remembers, across rounds, since when each member has been
// healthy. One runs on the leader; a new leader starts afresh, so it
// waits a full stabilization time before its first promotion.
type Autopilot struct {
	cfg           Config
	healthySince  map[uint64]time.Time
	lastContacted map[uint64]time.Time
}

// New returns an autopilot with cfg (defaults filled in).
func New(cfg Config) *Autopilot {
	cfg.Defaults()
	return &Autopilot{cfg: cfg, healthySince: map[uint64]time.Time{}, lastContacted: map[uint64]time.Time{}}
}

// Config returns the configuration in force.
func (a *Autopilot) Config() Config { return a.cfg }

// Target returns the voter count aimed at, given the members.
func (a *Autopilot) Target(servers []Server) int {
	if a.cfg.Voters > 0 {
		return a.cfg.Voters
	}
	eligible := 0
	for _, s := range servers {
		if s.InConfig && s.MayVote && s.Health != Failed && s.Health != Left {
			eligible++
		}
	}
	if eligible >= 5 {
		return 5
	}
	return 3
}

// healthy: alive in gossip, heard from recently by Raft, caught up.
func (a *Autopilot) healthy(s Server, last uint64, now time.Time) bool {
	if s.Leader {
		return true
	}
	return s.Health == Alive && !s.LastContact.IsZero() && now.Sub(s.LastContact) <= a.cfg.ContactThreshold &&
		s.Match+a.cfg.CatchUp >= last
}

// dead: failed (or gone from) gossip for the threshold, and unheard by
// Raft for as long. A member that flaps never stays failed that long.
func (a *Autopilot) dead(s Server, now time.Time) bool {
	if s.Leader || (s.Health != Failed && s.Health != Unknown) {
		return false
	}
	if now.Sub(s.HealthSince) < a.cfg.DeadThreshold {
		return false
	}
	return s.LastContact.IsZero() || now.Sub(s.LastContact) >= a.cfg.DeadThreshold
}

// Decide returns the one change to make now (None if the cell is as it
// should be). last is the leader's last log index.
func (a *Autopilot) Decide(servers []Server, last uint64, now time.Time) Decision {
	servers = slices.Clone(servers)
	// Remember contact and health across rounds.
	seen := map[uint64]bool{}
	for i := range servers {
		s := &servers[i]
		seen[s.ID] = true
		if t := a.lastContacted[s.ID]; t.After(s.LastContact) {
			s.LastContact = t
		} else if !s.LastContact.IsZero() {
			a.lastContacted[s.ID] = s.LastContact
		}
		if a.healthy(*s, last, now) {
			if _, ok := a.healthySince[s.ID]; !ok {
				a.healthySince[s.ID] = now
			}
		} else {
			delete(a.healthySince, s.ID)
		}
	}
	for id := range a.healthySince {
		if !seen[id] {
			delete(a.healthySince, id)
		}
	}
	for id := range a.lastContacted {
		if !seen[id] {
			delete(a.lastContacted, id)
		}
	}
	d := a.decide(servers, last, now)
	d.At = now
	return d
}

func (a *Autopilot) stable(s Server, now time.Time) bool {
	t, ok := a.healthySince[s.ID]
	return ok && now.Sub(t) >= a.cfg.Stabilization
}

func (a *Autopilot) decide(servers []Server, last uint64, now time.Time) Decision {
	var voters, learners []Server
	for _, s := range servers {
		switch {
		case s.InConfig && s.Voter:
			voters = append(voters, s)
		case s.InConfig:
			learners = append(learners, s)
		}
	}
	target := a.Target(servers)
	healthyVoters := 0
	for _, v := range voters {
		if a.healthy(v, last, now) {
			healthyVoters++
		}
	}
	// safeToDrop: the voters left after dropping v, healthy ones among
	// them, still make a quorum of the new configuration.
	safeToDrop := func(v Server) bool {
		h := healthyVoters
		if a.healthy(v, last, now) {
			h--
		}
		return len(voters)-1 >= 1 && h >= (len(voters)-1)/2+1
	}
	zoneVoters := map[string]int{}
	zones := map[string]bool{}
	for _, s := range servers {
		if s.InConfig && s.MayVote && s.Health != Left && s.Health != Failed {
			zones[s.Zone] = true
		}
	}
	for _, v := range voters {
		zoneVoters[v.Zone]++
	}
	// The best learner to promote: stable, may vote, from the zone with
	// the fewest voters (then by name, to be deterministic).
	candidates := slices.DeleteFunc(slices.Clone(learners), func(s Server) bool {
		return !s.MayVote || !a.stable(s, now)
	})
	slices.SortFunc(candidates, func(x, y Server) int {
		return cmp.Or(cmp.Compare(zoneVoters[x.Zone], zoneVoters[y.Zone]), cmp.Compare(x.Name, y.Name))
	})

	// 1. Members that left: at once (a voter only if quorum stays safe;
	// with a replacement ready and no voter to spare, promote it first).
	for _, s := range append(slices.Clone(voters), learners...) {
		if s.Health != Left || s.Leader {
			continue
		}
		if !s.Voter {
			return Decision{Action: Remove, Server: s, Reason: "left the cell"}
		}
		if len(voters) <= target && len(candidates) > 0 {
			return Decision{Action: Promote, Server: candidates[0], Reason: fmt.Sprintf("replaces %s, which left", s.Name)}
		}
		if safeToDrop(s) {
			return Decision{Action: Remove, Server: s, Reason: "left the cell"}
		}
	}
	// 2. New members found by gossip join as learners.
	for _, s := range servers {
		if !s.InConfig && s.Health == Alive {
			return Decision{Action: AddLearner, Server: s, Reason: "found by gossip"}
		}
	}
	// 3. Below target: promote.
	if len(voters) < target && len(candidates) > 0 {
		return Decision{Action: Promote, Server: candidates[0],
			Reason: fmt.Sprintf("%d voters, target %d; healthy for %v", len(voters), target, a.cfg.Stabilization)}
	}
	// 4. Dead voters: replace first, then remove.
	var deadVoters []Server
	for _, v := range voters {
		if a.dead(v, now) {
			deadVoters = append(deadVoters, v)
		}
	}
	if len(deadVoters) > 0 {
		if len(voters) <= target && len(candidates) > 0 {
			return Decision{Action: Promote, Server: candidates[0],
				Reason: fmt.Sprintf("replaces %s, dead for %v", deadVoters[0].Name, a.cfg.DeadThreshold)}
		}
		if len(voters) > target {
			for _, v := range deadVoters {
				if safeToDrop(v) {
					return Decision{Action: Remove, Server: v,
						Reason: fmt.Sprintf("dead for %v (failed in gossip, unheard by Raft); replaced", a.cfg.DeadThreshold)}
				}
			}
		}
	}
	// 5. Dead learners go.
	for _, s := range learners {
		if a.dead(s, now) {
			return Decision{Action: Remove, Server: s, Reason: fmt.Sprintf("learner dead for %v", a.cfg.DeadThreshold)}
		}
	}
	// 6. Zones: with 3 zones or more, move a voter from the most crowded
	// zone to one with two fewer, by promoting there first.
	if len(zones) >= 3 && len(voters) == target && len(candidates) > 0 {
		most := 0
		for _, n := range zoneVoters {
			most = max(most, n)
		}
		if c := candidates[0]; zoneVoters[c.Zone]+2 <= most {
			return Decision{Action: Promote, Server: c, Reason: fmt.Sprintf("spreads voters over zones (zone %q has %d)", c.Zone, zoneVoters[c.Zone])}
		}
	}
	// 7. Above target: a voter from the most crowded zone steps back.
	if len(voters) > target {
		spare := slices.DeleteFunc(slices.Clone(voters), func(v Server) bool { return v.Leader })
		slices.SortFunc(spare, func(x, y Server) int {
			return cmp.Or(cmp.Compare(zoneVoters[y.Zone], zoneVoters[x.Zone]), boolCmp(a.healthy(x, last, now), a.healthy(y, last, now)), cmp.Compare(x.Name, y.Name))
		})
		for _, v := range spare {
			if safeToDrop(v) {
				return Decision{Action: Demote, Server: v, Reason: fmt.Sprintf("%d voters, target %d; zone %q has %d", len(voters), target, v.Zone, zoneVoters[v.Zone])}
			}
		}
	}
	return Decision{Action: None, Reason: fmt.Sprintf("%d voters (%d healthy), target %d", len(voters), healthyVoters, target)}
}

// boolCmp orders false before true: unhealthy voters step back first.
func boolCmp(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	}
	return 1
}
