package main

import (
	"context"
	"fmt"

	"github.com/coordcell/coord/bench/internal/attack"
	"github.com/coordcell/coord/bench/internal/member"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// attacksScenario is issue 22's attacks on the client door (package
// attack), run against member processes.
const attacksScenario = "client-attacks"

// procsAttacks runs every attack of package attack against the member
// processes of c, each answering for its own member (attack.Service),
// and returns the figures. It prints the bounds SECURITY.md states: the
// largest heap and RSS rise of any member over an attack, and the
// longest commit gap, but for close-stuck, whose closing of the leader
// makes the others elect a new one.
func procsAttacks(ctx context.Context, c member.Cell, cfg attack.Config, logf func(string, ...any)) ([]scenario.Metric, error) {
	targets := make([]attack.Target, len(c))
	for i, p := range c {
		targets[i] = attack.Remote{Call: func(ctx context.Context, op string, body, out any) error {
			_, err := p.Call(ctx, op, body, out)
			return err
		}}
	}
	rep, err := attack.Run(ctx, cfg, targets, logf)
	if rep == nil {
		return nil, err
	}
	heap, rss := rep.MaxDelta("close-stuck")
	logf("over every attack but close-stuck: heap at most %.0f MiB, RSS at most %.0f MiB over a member's start; "+
		"longest commit gap %.0f ms", float64(heap)/(1<<20), float64(rss)/(1<<20), rep.MaxGap("close-stuck")*1000)
	for _, r := range rep.Results {
		if r.Error != "" && err == nil {
			err = fmt.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	return attackMetrics(rep), err
}

// attackMetrics returns the report as the bench's figures, named
// "attacks.<attack>.<figure>": per attack, every member's peak RSS and
// heap over its figures at the attack's start (m<i>.rss_delta,
// m<i>.heap_delta) and the victim's peaks, each control's longest commit
// gap and failed puts, every member's door counters that moved, and the
// attack's own figures. Counts that are mostly zero are OmitZero.
func attackMetrics(rep *attack.Report) []scenario.Metric {
	var out []scenario.Metric
	add := func(name, label, unit string, v float64, omitZero bool) {
		out = append(out, scenario.Metric{Name: "attacks." + name, Label: label, Unit: unit, Value: v, OmitZero: omitZero})
	}
	role := func(m int) string {
		switch m {
		case rep.Victim:
			return fmt.Sprintf("m%d (victim)", m)
		case rep.Other:
			return fmt.Sprintf("m%d (other control's)", m)
		}
		return fmt.Sprintf("m%d", m)
	}
	for i, s := range rep.Idle {
		add(fmt.Sprintf("idle.m%d.rss", i), "idle "+role(i)+": RSS", "MiB", attackMiB(s.RSS), false)
		add(fmt.Sprintf("idle.m%d.heap", i), "idle "+role(i)+": Go heap", "MiB", attackMiB(s.Heap), false)
	}
	for i, c := range rep.IdleWindow.CPUCores {
		add(fmt.Sprintf("idle.m%d.cpu", i), "idle "+role(i)+": CPU", "cores", c, false)
	}
	add("idle.log_entries", "idle: log entries beyond the controls' puts", "entries", float64(rep.IdleWindow.LogEntries), false)
	for _, res := range rep.Results {
		p := res.Name + "."
		l := res.Name
		add(p+"seconds", l+" ("+res.Label+"): duration", "s", res.Seconds, false)
		for m := range res.Peak {
			if m >= len(res.Base) {
				break
			}
			add(fmt.Sprintf("%sm%d.rss_delta", p, m), l+": "+role(m)+" peak RSS over its start", "MiB", attackMiB(res.Peak[m].RSS-res.Base[m].RSS), false)
			add(fmt.Sprintf("%sm%d.heap_delta", p, m), l+": "+role(m)+" peak Go heap over its start", "MiB", attackMiB(res.Peak[m].Heap-res.Base[m].Heap), false)
			d := res.DoorDelta(m)
			add(fmt.Sprintf("%sm%d.refused", p, m), l+": "+role(m)+" door: connections refused or dropped", "conns", float64(d.Refused), m != rep.Victim)
			add(fmt.Sprintf("%sm%d.cut_slow", p, m), l+": "+role(m)+" door: clients cut off for not reading", "conns", float64(d.CutSlow), m != rep.Victim)
			add(fmt.Sprintf("%sm%d.cut_idle", p, m), l+": "+role(m)+" door: clients cut off idle", "conns", float64(d.CutIdle), m != rep.Victim)
		}
		if rep.Victim < len(res.Peak) {
			v := res.Peak[rep.Victim]
			add(p+"victim.rss_peak", l+": victim's peak RSS", "MiB", attackMiB(v.RSS), false)
			add(p+"victim.heap_peak", l+": victim's peak Go heap", "MiB", attackMiB(v.Heap), false)
			add(p+"victim.queued_peak", l+": victim door: most bytes queued for clients at once, since Open", "MiB", attackMiB(v.Door.QueuedPeak), false)
		}
		for _, c := range res.Controls {
			add(p+"gap."+c.Via, l+": longest gap between commits of the control via the "+c.Via+" door", "ms", c.GapSeconds*1000, false)
			add(p+"control_errors."+c.Via, l+": failed puts of the control via the "+c.Via+" door", "puts", float64(c.Errors), true)
		}
		for _, f := range res.Figures {
			add(p+f.Name, l+": "+f.Label, f.Unit, f.Value, false)
		}
		if res.Error != "" {
			add(p+"failed", l+": FAILED: "+res.Error, "", 1, false)
		}
	}
	return out
}

func attackMiB(b int64) float64 { return float64(b) / (1 << 20) }
