// Command bench runs coord and embedded etcd side by side, on the same
// machine and in the same shape (three members in one process, loopback,
// data on disk with fsync, default timings), and prints each figure for
// both with the ratio coord/etcd. From bench/:
//
//	go run ./bench -scenario all
//
// Each scenario runs on each side in its own child process (the program
// re-executes itself with a hidden flag), so the CPU time and peak RSS
// reported are that side's own. Children report JSON on stdout; the
// parent prints the table and writes the JSON file named by -out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program, args without the program name; it returns the exit
// code.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.child != "" {
		return runChild(ctx, o, stdout, stderr)
	}
	return runParent(ctx, o, args, stdout, stderr)
}
