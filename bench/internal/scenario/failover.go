package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coordcell/coord/bench/internal/cell"
)

const (
	// failoverPoll is how often the survivors are asked whether one leads.
	failoverPoll = 2 * time.Millisecond
	// writeEvery is how often a new write attempt starts after the stop:
	// attempts overlap, so the first write is seen within this much of
	// when the cell could first take one.
	writeEvery = 2 * time.Millisecond
	// failoverLimit bounds one failover.
	failoverLimit = 30 * time.Second
)

// Failover measures, on cfg.FailoverRounds fresh cells, the time from
// stopping the leader (cfg.StopMode) until a survivor leads and until a
// write through a survivor commits; and once, before the first stop, the
// time from a election leader's holder dying (its session orphaned, so it
// expires after cfg.ElectionTTL) until a waiting candidate leads.
func Failover(ctx context.Context, env Env, cfg Config) ([]Metric, error) {
	var leaders, writes []time.Duration
	var handover time.Duration
	for r := range cfg.FailoverRounds {
		_, err := withCell(ctx, env, func(c cell.Cell) ([]Metric, error) {
			if r == 0 {
				var err error
				if handover, err = electionHandover(ctx, c, cfg.ElectionTTL); err != nil {
					return nil, fmt.Errorf("election hand-over: %w", err)
				}
				env.log("election hand-over (TTL %v): %v", cfg.ElectionTTL, handover.Round(time.Millisecond))
			}
			lead, write, err := stopLeader(ctx, c, cfg.StopMode)
			if err != nil {
				return nil, fmt.Errorf("failover round %d: %w", r+1, err)
			}
			env.log("failover round %d (%s): new leader %v, first write %v", r+1, cfg.StopMode,
				lead.Round(time.Millisecond), write.Round(time.Millisecond))
			leaders, writes = append(leaders, lead), append(writes, write)
			return nil, nil
		})
		if err != nil {
			return nil, err
		}
	}
	leaders, writes = sortedCopy(leaders), sortedCopy(writes)
	label := fmt.Sprintf("failover (%s stop of the leader, %d rounds)", cfg.StopMode, cfg.FailoverRounds)
	return []Metric{
		{Name: "failover.leader.p50", Label: label + ": new leader, median", Unit: "ms", Value: ms(percentile(leaders, 50))},
		{Name: "failover.leader.max", Label: label + ": new leader, max", Unit: "ms", Value: ms(leaders[len(leaders)-1])},
		{Name: "failover.write.p50", Label: label + ": first write, median", Unit: "ms", Value: ms(percentile(writes, 50))},
		{Name: "failover.write.max", Label: label + ": first write, max", Unit: "ms", Value: ms(writes[len(writes)-1])},
		{Name: "failover.election", Label: fmt.Sprintf("election hand-over after the holder dies (TTL %v)", cfg.ElectionTTL),
			Unit: "ms", Value: ms(handover)},
	}, nil
}

// stopLeader stops the leader and returns how long until a survivor led
// and until a write through a survivor committed, both from the call.
func stopLeader(ctx context.Context, c cell.Cell, mode cell.StopMode) (lead, write time.Duration, err error) {
	old := c.Leader()
	if old < 0 {
		return 0, 0, errors.New("no leader to stop")
	}
	var survivors []int
	for m := range cell.Members {
		if m != old {
			survivors = append(survivors, m)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()

	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(ctx, old, mode) }()
	lead, write = awaitFailover(ctx, c, old, survivors, start)
	if err := <-stopped; err != nil {
		return 0, 0, fmt.Errorf("stop member %d: %w", old, err)
	}
	if lead == 0 || write == 0 {
		return 0, 0, fmt.Errorf("no new leader and write within %v", failoverLimit)
	}
	return lead, write, nil
}

// awaitFailover returns how long from start, when member old was told to
// stop, until a survivor led and until a write through a survivor
// committed (0 for what ctx ended first): overlapping write attempts, one
// started every writeEvery, alternating between the survivors, so the
// first write is seen within writeEvery of when the cell could take one.
func awaitFailover(ctx context.Context, c cell.Cell, old int, survivors []int, start time.Time) (lead, write time.Duration) {
	var wg sync.WaitGroup
	// A survivor leads.
	wg.Go(func() {
		t := time.NewTicker(failoverPoll)
		defer t.Stop()
		for {
			if m := c.Leader(); m >= 0 && m != old {
				lead = time.Since(start)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	// A write through a survivor commits.
	wg.Go(func() {
		done := make(chan time.Duration, 1)
		actx, stopAttempts := context.WithCancel(ctx)
		var attempts sync.WaitGroup
		defer attempts.Wait()
		defer stopAttempts()
		t := time.NewTicker(writeEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			attempts.Go(func() {
				err := c.Put(actx, survivors[i%len(survivors)], "bench/failover/"+strconv.Itoa(i), []byte("x"))
				if err == nil {
					select {
					case done <- time.Since(start):
					default:
					}
				}
			})
			select {
			case write = <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Wait()
	return lead, write
}

// electionHandover elects a holder on member 0, has a candidate wait on
// member 1, then orphans the holder's session (its holder "dies"; the
// cell expires the session after ttl) and returns how long until the
// candidate leads.
func electionHandover(ctx context.Context, c cell.Cell, ttl time.Duration) (time.Duration, error) {
	holder, err := c.NewSession(ctx, 0, ttl)
	if err != nil {
		return 0, err
	}
	defer holder.Close(ctx)
	if err := holder.NewElection("bench").Campaign(ctx, "holder"); err != nil {
		return 0, err
	}
	waiter, err := c.NewSession(ctx, 1, ttl)
	if err != nil {
		return 0, err
	}
	defer waiter.Close(ctx)
	ctx, cancel := context.WithTimeout(ctx, 3*ttl+failoverLimit)
	defer cancel()
	won := make(chan error, 1)
	candidate := waiter.NewElection("bench")
	go func() { won <- candidate.Campaign(ctx, "candidate") }()
	// Let the candidate queue up behind the holder.
	sleep(ctx, 500*time.Millisecond)
	select {
	case err := <-won:
		return 0, fmt.Errorf("the candidate led while the holder lived (err %v)", err)
	default:
	}
	start := time.Now()
	holder.Orphan()
	if err := <-won; err != nil {
		return 0, fmt.Errorf("candidate: %w", err)
	}
	took := time.Since(start)
	return took, candidate.Resign(ctx)
}
