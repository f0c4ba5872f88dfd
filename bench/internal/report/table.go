package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows as an aligned table, a blank line between
// scenarios, then the targets with their verdicts. Each side's column is
// its median over the rounds, coord/etcd the median of the paired ratios
// and the range beside it, marked LEVEL when it crosses 1.0x.
func WriteTable(w io.Writer, rows []Row) error {
	if n := maxRounds(rows); n > 1 {
		fmt.Fprintf(w, "coord, etcd: each side's median over %d rounds, interleaved (coord, etcd, coord, etcd...); "+
			"coord/etcd: the median of the rounds' paired ratios, their range beside it, LEVEL where it crosses 1.0x\n\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tcoord\tetcd\tcoord/etcd\tpaired range\t\ttarget\t")
	last := ""
	for _, r := range rows {
		if r.Scenario != last && last != "" {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t")
		}
		last = r.Scenario
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Label, r.Unit, num(r.Coord), num(r.Etcd), ratio(r.Ratio),
			spreadRange(r), levelMark(r, "LEVEL"), verdict(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v := Verdicts(rows); len(v) > 0 {
		fmt.Fprintln(w, "\nissue 5 targets:")
		for _, r := range v {
			got := ratio(r.Ratio)
			if !strings.HasSuffix(r.Target, "x") {
				got = num(r.Coord)
			} else if r.Level {
				got += " (level)"
			}
			fmt.Fprintf(w, "  %-6s %-62s %-16s target %s\n", r.Verdict, r.Label, got, r.Target)
		}
	}
	return nil
}

// WriteMarkdown prints rows as a Markdown table, the columns of
// WriteTable: RESULTS.md's headline tables have this form.
func WriteMarkdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| figure | unit | coord (median) | etcd (median) | coord/etcd (median of paired ratios) | paired range | level | target |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Label, r.Unit, num(r.Coord), num(r.Etcd), ratio(r.Ratio),
			spreadRange(r), levelMark(r, "**level**"), verdict(r))
	}
}

// maxRounds returns the most rounds any row has.
func maxRounds(rows []Row) int {
	n := 0
	for _, r := range rows {
		n = max(n, len(r.CoordRounds), len(r.EtcdRounds))
	}
	return n
}

// spreadRange is the paired ratios' range, "-" without any.
func spreadRange(r Row) string {
	if r.Ratio == nil {
		return "-"
	}
	return r.spread().Range()
}

func levelMark(r Row, mark string) string {
	if r.Level {
		return mark
	}
	return ""
}

func verdict(r Row) string {
	if r.Target == "" {
		return ""
	}
	return r.Verdict + " (" + r.Target + ")"
}

func num(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v >= 100 || *v == float64(int64(*v)):
		return fmt.Sprintf("%.0f", *v)
	case *v >= 10:
		return fmt.Sprintf("%.1f", *v)
	default:
		return fmt.Sprintf("%.2f", *v)
	}
}

func ratio(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v < 1:
		// Three decimals, so a ratio just past a bound (0.505 against
		// <= 0.5) does not print as on it.
		return fmt.Sprintf("%.3fx", *v)
	default:
		return fmt.Sprintf("%.2fx", *v)
	}
}
