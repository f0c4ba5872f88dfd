package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints rows as an aligned table, a blank line between
// scenarios, then the targets with their verdicts.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tcoord\tetcd\tcoord/etcd\ttarget\t")
	last := ""
	for _, r := range rows {
		if r.Scenario != last && last != "" {
			fmt.Fprintln(tw, "\t\t\t\t\t\t")
		}
		last = r.Scenario
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Label, r.Unit, num(r.Coord), num(r.Etcd), ratio(r.Ratio), verdict(r))
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
			}
			fmt.Fprintf(w, "  %-6s %-62s %-10s target %s\n", r.Verdict, r.Label, got, r.Target)
		}
	}
	return nil
}

// WriteMarkdown prints rows as a Markdown table.
func WriteMarkdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| figure | unit | coord | etcd | coord/etcd | target |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Label, r.Unit, num(r.Coord), num(r.Etcd), ratio(r.Ratio), verdict(r))
	}
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
