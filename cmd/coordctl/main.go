// Command coordctl is the operator's CLI for a coord cell. It talks to
// one member's admin endpoint: the handler the host mounts with
// (*coord.Node).Handler(coord.WithAdmin(token)), under /admin/.
//
//	coordctl --endpoint https://host:8080/coord --token T status
//	coordctl locks
//	coordctl snapshot save backup.coord
//
// Every command prints a table for people, or JSON with --json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

const usage = `coordctl talks to a coord member's admin endpoint.

Usage:
  coordctl [flags] COMMAND [ARGS] [flags]

Flags go before or after the command; after "--" everything is an
argument (for one that starts with a dash: coordctl put k -- --v).

Commands:
  status                        this member's status and the members' health
  members                       the members, their roles and health
  members add-learner NAME ADDR add a learner (it catches up, then promote it)
  members promote NAME          make a caught-up learner a voter
  members remove NAME           remove a member
  get KEY                       read a key (linearizable)
  put KEY VALUE                 write a key
  del KEY                       delete a key
  list [PREFIX]                 list keys under PREFIX (all keys without one)
  watch PREFIX [AFTER_REV]      print changes under PREFIX (after AFTER_REV,
                                or from now on) until interrupted; --timeout
                                applies only if given
  txn FILE                      run a transaction from a JSON file (- = stdin):
                                {"if":   [{"key":"k","target":"version","op":"=","int":3}],
                                 "then": [{"op":"put","key":"k","value":"v"}],
                                 "else": [{"op":"get","key":"k"}]}
                                targets: version create_rev mod_rev value;
                                ops: put get delete get_prefix delete_prefix
  sessions                      live sessions, with TTL and time unheard
  sessions revoke ID            end a session now, as its expiry would
  locks                         locks: holders and queues, with fencing tokens;
                                a lock in lock-delay (its holder's session
                                expired) shows its marker and no holder
  elections                     elections: leaders, values and candidates
  snapshot save FILE            write an online backup to FILE (see coord.Restore)
  client issue -secret-file FILE [-pem DIR] NAME [GENERATION]
                                print client NAME's credential (generation 1
                                unless given) for ClientConfig.Credential, from
                                the cell's client secret (the file's exact
                                bytes; $COORDCTL_CLIENT_SECRET_FILE); with -pem,
                                also write DIR/client.crt, DIR/client.key and
                                DIR/ca.crt for other TLS clients. Needs no
                                member. To revoke, issue GENERATION+1 and set
                                Config.ClientRevoked[NAME] on every member

There is no compact or defrag: members compact their log, history and
files by themselves.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordctl:", err)
		os.Exit(1)
	}
}

// errUsage is a command line coordctl cannot run.
var errUsage = errors.New("usage")

// run is the whole command, with its streams, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var c client
	fs.StringVar(&c.endpoint, "endpoint", envOr("COORDCTL_ENDPOINT", "http://127.0.0.1:8080"),
		"URL where the member's handler is mounted ($COORDCTL_ENDPOINT)")
	fs.StringVar(&c.token, "token", os.Getenv("COORDCTL_TOKEN"), "bearer token of the admin endpoint ($COORDCTL_TOKEN)")
	fs.StringVar(&c.caFile, "cacert", "", "PEM file of the CA that signed the endpoint's certificate (default: system roots)")
	jsonOut := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each command (watch: none unless given)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: no command", errUsage)
	}
	if err := c.init(); err != nil {
		return err
	}
	timed := args[0] != "watch"
	fs.Visit(func(f *flag.Flag) { timed = timed || f.Name == "timeout" })
	if timed {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	out := output{w: stdout, json: *jsonOut}
	return dispatch(ctx, &c, out, args)
}

// parseFlags parses the flags wherever they are on the command line,
// before the command or after it (coordctl status --json), where the
// flag package alone stops at the first argument. "--" ends the flags;
// "-" (stdin) and negative numbers are arguments. It returns the
// arguments, in order.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if !isFlag(a) {
			rest = append(rest, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil && len(rest) > 0 && ownFlags[rest[0]] {
			// A flag of the command's own (client issue -pem DIR): its
			// parser takes it, and refuses what it does not know.
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if f == nil || hasValue {
			continue // Parse refuses an unknown one
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) { // its value, whatever it looks like
			i++
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return rest, nil
}

// ownFlags names the commands that parse flags of their own, which
// parseFlags leaves to them when they follow the command.
var ownFlags = map[string]bool{"client": true}

// isFlag reports whether a looks like a flag: one or two dashes and a
// name, not a number.
func isFlag(a string) bool {
	name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if name == a || name == "" {
		return false
	}
	return name[0] < '0' || name[0] > '9'
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func need(args []string, n int, form string) error {
	if len(args) != n {
		return fmt.Errorf("%w: coordctl %s", errUsage, form)
	}
	return nil
}
