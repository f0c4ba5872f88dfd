// Package attack is the bench's client-attacks scenario: issue 22's
// attacks on a member's client door, each at full size, one after the
// other, against a cell whose members run in their own processes (or,
// in its tests, in this one), while honest control clients put every
// 100 ms. For each attack it reports every member's peak RSS and Go heap
// against its figures just before (after a GC), the member's door
// counters (refused, cut off for not reading or for idling), the
// longest gap between the controls' commits, and what the attack itself
// saw (connections held, replies, refusals by class, Close's duration).
//
// The attacker plays an ordinary client: plaintext identities (the name
// is the identity), read-only ("reader-*": no write grant, by Policy) for
// every attack, frames built from the protocol's documented layout
// (package clientwire's doc) where a coord.Client would behave. The
// attacked member is the leader, whose door and session work matter
// most; one control client goes through its door, one through another
// member's.
package attack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/coordcell/coord"
)

// ReaderPrefix starts the identities Policy grants no write: every
// attacker's.
const ReaderPrefix = "reader-"

// Policy is the members' Config.ClientPolicy in the scenario: a client
// named ReaderPrefix... may read, watch and keep sessions, and write
// nothing; every other client (the bench's own writer, controls and
// probes) may write every key.
func Policy(identity string) (coord.ClientGrant, error) {
	if strings.HasPrefix(identity, ReaderPrefix) {
		return coord.ClientGrant{}, nil
	}
	return coord.ClientGrant{WritePrefixes: []string{""}}, nil
}

// Config sizes the attacks. Full is issue 22's sizes.
type Config struct {
	// Conns silent TCP connections are held on the door for ConnHold,
	// each dialled again when the member drops it, while an honest
	// client connects every ProbeEvery.
	Conns      int           `json:"conns"`
	ConnHold   time.Duration `json:"conn_hold"`
	ProbeEvery time.Duration `json:"probe_every"`
	// Watches unread watches while WatchPuts values of WatchValue bytes
	// are put under their prefix.
	Watches    int `json:"watches"`
	WatchPuts  int `json:"watch_puts"`
	WatchValue int `json:"watch_value"`
	// Reads prefix reads, replies never read, of a prefix of
	// ReadPrefixBytes (values), and again of one of FitPrefixBytes
	// (small enough that its reply fits a frame).
	Reads           int `json:"reads"`
	ReadPrefixBytes int `json:"read_prefix_bytes"`
	FitPrefixBytes  int `json:"fit_prefix_bytes"`
	// KeepAliveFrames keep-alive frames of KeepAliveBytes (at most the
	// member's frame limit) of one-byte session IDs, each on its own
	// connection.
	KeepAliveFrames int `json:"keepalive_frames"`
	KeepAliveBytes  int `json:"keepalive_bytes"`
	// A transaction of TxnOps OpGetPrefix("") over TxnKeys keys of
	// TxnValue bytes, once and then Txns in a row.
	TxnKeys  int `json:"txn_keys"`
	TxnValue int `json:"txn_value"`
	TxnOps   int `json:"txn_ops"`
	Txns     int `json:"txns"`
	// Sessions sessions of SessionTTL tried by one identity and
	// abandoned, by SessionWorkers at once; then SpreadSessions spread
	// over as many identities as the per-identity bound needs (0 skips
	// it), abandoned too. Each is followed by an idle window.
	Sessions       int           `json:"sessions"`
	SpreadSessions int           `json:"spread_sessions"`
	SessionTTL     time.Duration `json:"session_ttl"`
	SessionWorkers int           `json:"session_workers"`
	// CloseBytes of replies are asked for, none read, the connection
	// half-closed, then the member's node closed and timed.
	CloseBytes int `json:"close_bytes"`
	// Hold is how long an attack that queues work holds its connection
	// before it lets go; Idle the idle windows (at the start, after the
	// sessions); Settle the pause after each attack.
	Hold   time.Duration `json:"hold"`
	Idle   time.Duration `json:"idle"`
	Settle time.Duration `json:"settle"`
	// ControlEvery is the controls' put interval.
	ControlEvery time.Duration `json:"control_every"`
}

// Full returns issue 22's sizes.
func Full() Config {
	return Config{
		Conns: 2100, ConnHold: 20 * time.Second, ProbeEvery: 250 * time.Millisecond,
		Watches: 128, WatchPuts: 70, WatchValue: 64 << 10,
		Reads: 200, ReadPrefixBytes: 4 << 20, FitPrefixBytes: 3 << 20,
		KeepAliveFrames: 4, KeepAliveBytes: 16 << 20,
		TxnKeys: 10_000, TxnValue: 100, TxnOps: 128, Txns: 8,
		Sessions: 200_000, SpreadSessions: 200_000, SessionTTL: coord.DefaultMaxSessionTTL, SessionWorkers: 64,
		CloseBytes: 64 << 20,
		Hold:       3 * time.Second, Idle: 10 * time.Second, Settle: 2 * time.Second,
		ControlEvery: 100 * time.Millisecond,
	}
}

// Small returns sizes for a quick run of every attack (a smoke run):
// each attack's shape at a fraction of its size.
func Small() Config {
	return Config{
		Conns: 100, ConnHold: 2 * time.Second, ProbeEvery: 250 * time.Millisecond,
		Watches: 8, WatchPuts: 10, WatchValue: 16 << 10,
		Reads: 20, ReadPrefixBytes: 256 << 10, FitPrefixBytes: 128 << 10,
		KeepAliveFrames: 2, KeepAliveBytes: 1 << 20,
		TxnKeys: 500, TxnValue: 100, TxnOps: 16, Txns: 2,
		Sessions: 500, SpreadSessions: 0, SessionTTL: time.Minute, SessionWorkers: 16,
		CloseBytes: 2 << 20,
		Hold:       500 * time.Millisecond, Idle: time.Second, Settle: 200 * time.Millisecond,
		ControlEvery: 100 * time.Millisecond,
	}
}

// Figure is one thing an attack saw, beside the members' figures.
type Figure struct {
	Name  string  `json:"name"`
	Label string  `json:"label"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// Result is one attack's accounting.
type Result struct {
	Name    string  `json:"name"`
	Label   string  `json:"label"`
	Seconds float64 `json:"seconds"`
	// Base and Peak are each member's figures at the attack's start
	// (after a GC) and at its end (the highest RSS and heap in between).
	Base []Sample `json:"base"`
	Peak []Sample `json:"peak"`
	// Controls is each control client's longest gap between commits in
	// the attack's window, its commits and failed puts there.
	Controls []ControlWindow `json:"controls"`
	Figures  []Figure        `json:"figures"`
	Error    string          `json:"error,omitempty"`
}

// ControlWindow is a control client's record over one window.
type ControlWindow struct {
	// Via names the door it puts through: "victim" or "other".
	Via        string  `json:"via"`
	GapSeconds float64 `json:"gap_seconds"`
	Commits    int     `json:"commits"`
	Errors     int     `json:"errors"`
}

// Report is the scenario's accounting.
type Report struct {
	// Victim is the index of the member attacked (the leader at the
	// start); Other that of the member the other control goes through.
	Victim int `json:"victim"`
	Other  int `json:"other"`
	// Idle is every member's figures at rest after the preload, and
	// IdleWindow what they used over Config.Idle then.
	Idle       []Sample   `json:"idle"`
	IdleWindow IdleWindow `json:"idle_window"`
	Results    []Result   `json:"results"`
}

// IdleWindow is what the members used over a window with no attack:
// CPU (cores, by member) and log entries beyond the controls' puts.
type IdleWindow struct {
	Seconds    float64   `json:"seconds"`
	CPUCores   []float64 `json:"cpu_cores"`
	LogEntries int64     `json:"log_entries"`
}

// quiet discards the clients' logs: an attack makes the clients it
// plays log every refusal.
var quiet = slog.New(slog.DiscardHandler)

// Find returns the result called name, or nil.
func (r *Report) Find(name string) *Result {
	for i := range r.Results {
		if r.Results[i].Name == name {
			return &r.Results[i]
		}
	}
	return nil
}

// Figure returns the figure called name, and whether there is one.
func (r *Result) Figure(name string) (float64, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// errClass names an error's kind for the refusal counts.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, coord.ErrReadTooLarge):
		return "read-too-large"
	case errors.Is(err, coord.ErrTooManySessions):
		return "too-many-sessions"
	case errors.Is(err, coord.ErrInvalidTTL):
		return "invalid-ttl"
	case errors.Is(err, coord.ErrQuotaExceeded):
		return "quota"
	case errors.Is(err, coord.ErrOverloaded):
		return "overloaded"
	case errors.Is(err, coord.ErrForbidden):
		return "forbidden"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}

// counts is a count by class, kept in the order classes first appear.
type counts struct {
	order []string
	n     map[string]int
}

func (c *counts) add(class string) {
	if c.n == nil {
		c.n = map[string]int{}
	}
	if _, ok := c.n[class]; !ok {
		c.order = append(c.order, class)
	}
	c.n[class]++
}

// figures returns one figure per class, named prefix.class.
func (c *counts) figures(prefix, label string) []Figure {
	var out []Figure
	for _, k := range c.order {
		out = append(out, Figure{Name: prefix + "." + k, Label: fmt.Sprintf("%s: %s", label, k), Unit: "calls", Value: float64(c.n[k])})
	}
	return out
}
