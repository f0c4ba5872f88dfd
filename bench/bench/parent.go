package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/coordcell/coord/bench/internal/attack"
	"github.com/coordcell/coord/bench/internal/proc"
	"github.com/coordcell/coord/bench/internal/report"
	"github.com/coordcell/coord/bench/internal/scenario"
)

// childLimit bounds one child process.
const childLimit = 20 * time.Minute

// results is the JSON file's content.
type results struct {
	Command         string          `json:"command"`
	Started         time.Time       `json:"started"`
	DurationSeconds float64         `json:"duration_seconds"`
	Machine         machine         `json:"machine"`
	EtcdClient      string          `json:"etcd_client"`
	Shape           string          `json:"shape"`
	Rounds          int             `json:"rounds"`
	Config          scenario.Config `json:"config"`
	// Attacks sizes client-attacks, when it ran.
	Attacks *attack.Config `json:"attacks,omitempty"`
	// Scale sizes the scale scenario, when it ran.
	Scale *scaleOptions `json:"scale,omitempty"`
	// MemberGoMemLimit is the member processes' GOMEMLIMIT, if any.
	MemberGoMemLimit string         `json:"member_gomemlimit,omitempty"`
	Rows             []report.Row   `json:"rows"`
	Children         []report.Child `json:"children"`
}

// runParent runs every scenario on every side, one child process at a
// time, then prints the table and writes the JSON file. It returns 1 if
// a child failed.
func runParent(ctx context.Context, o *options, args []string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	res := results{
		Command:    strings.Join(append([]string{"go run ./bench"}, args...), " "),
		Started:    time.Now(),
		Machine:    readMachine(),
		EtcdClient: string(o.etcdClient),
		Shape:      o.shape,
		Rounds:     o.rounds,
		Config:     o.cfg,
	}
	if slices.Contains(o.scenarios, attacksScenario) {
		res.Attacks = &o.attack
	}
	if slices.Contains(o.scenarios, scaleScenario) {
		res.Scale = &o.scale
	}
	res.MemberGoMemLimit = o.memberGoMemLimit
	fmt.Fprintf(stderr, "bench: %s; %d CPUs (%s); data under %s\n",
		res.Command, res.Machine.NumCPU, res.Machine.CPUModel, o.dir)
	failed := false
	var order []string
	for _, name := range o.scenarios {
		sc, _ := scenario.ByName(name)
		one := o.shape != shapeProcs && !sc.ProcsOnly
		procs := (o.shape != shapeOne || sc.ProcsOnly) && procsScenarios[name]
		if one {
			order = append(order, name)
		}
		if procs {
			order = append(order, name+procsSuffix)
		}
		var sides []string
		for _, side := range o.sides {
			if !sc.CoordOnly || side == "coord" {
				sides = append(sides, side)
			}
		}
		// The rounds interleave the sides, shape by shape, so each
		// round's pair of children ran one right after the other.
		rounds := o.rounds
		if sc.Once {
			rounds = 1 // client-attacks, scale: peaks, or one long run, on each side
		}
		for round := 1; round <= rounds; round++ {
			for _, shape := range []bool{false, true} {
				if (!shape && !one) || (shape && !procs) {
					continue
				}
				for _, side := range sides {
					if ctx.Err() != nil {
						return 1
					}
					var ch report.Child
					if shape {
						ch = runProcs(ctx, o, exe, side, name, round, stderr)
					} else {
						ch = runOne(ctx, exe, args, side, name, round, o.rounds, stderr)
					}
					ch.Round = round
					if ch.Error != "" {
						failed = true
						fmt.Fprintf(stderr, "== %s %s round %d FAILED: %s\n", side, ch.Scenario, round, ch.Error)
					}
					res.Children = append(res.Children, ch)
				}
			}
		}
		if ctx.Err() != nil {
			return 1
		}
	}
	res.DurationSeconds = time.Since(res.Started).Seconds()
	res.Rows = report.Rows(order, res.Children)
	fmt.Fprintln(stdout)
	if err := report.WriteTable(stdout, res.Rows); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nrun took %.0fs; results in %s\n", res.DurationSeconds, o.out)
	if err := writeJSON(o.out, res); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if o.md != "" {
		var b bytes.Buffer
		report.WriteMarkdown(&b, res.Rows)
		if err := os.WriteFile(o.md, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	if failed {
		return 1
	}
	return 0
}

// runOne runs one child (round round of rounds) and returns its report,
// with the CPU time and peak RSS of its rusage.
func runOne(ctx context.Context, exe string, args []string, side, name string, round, rounds int, stderr io.Writer) report.Child {
	fmt.Fprintf(stderr, "== %s %s, round %d of %d\n", side, name, round, rounds)
	ctx, cancel := context.WithTimeout(ctx, childLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append(slices.Clone(args), "-"+childFlag, fmt.Sprintf("%s:%s:%d", side, name, round))...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	start := time.Now()
	runErr := cmd.Run()
	ch := report.Child{Side: side, Scenario: name}
	if err := json.Unmarshal(out.Bytes(), &ch); err != nil {
		ch = report.Child{Side: side, Scenario: name,
			Error: fmt.Sprintf("child reported nothing usable (exit: %v; decode: %v)", runErr, err)}
	}
	ch.WallSeconds = time.Since(start).Seconds()
	if cmd.ProcessState != nil {
		u := proc.ChildUsage(cmd.ProcessState)
		ch.CPUSeconds, ch.PeakRSS = u.CPU.Seconds(), u.PeakRSS
	}
	fmt.Fprintf(stderr, "== %s %s: %.1fs, CPU %.1fs, peak RSS %.0f MB\n",
		side, name, ch.WallSeconds, ch.CPUSeconds, float64(ch.PeakRSS)/(1<<20))
	return ch
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
