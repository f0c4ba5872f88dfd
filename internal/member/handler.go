package member

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/raftnode"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HandlerOptions are what the root's HandlerOptions set: metrics served
// from Gatherer, and the admin API (with its bearer token, if any).
type HandlerOptions struct {
	Gatherer prometheus.Gatherer
	Admin    bool
	Token    string
}

// Handler returns the member's operational HTTP handler, for the host to
// mount where it likes (it serves no port of its own):
//
//	/healthz   200 while the member runs, 503 once it has stopped
//	/readyz    200 when the member knows a leader, has caught up and
//	           applied up to its commit index, and is in contact with the
//	           leader, else 503 with the reason (see Ready)
//	/status    the member and cell status as JSON (StatusReport)
//	/metrics   Prometheus metrics, with WithMetricsGatherer
//	/          a read-only HTML page: members, locks, elections, sessions
//	/admin/... the operator's API used by coordctl, with WithAdmin
//
// Paths are relative to where the handler is mounted: mount it with
// http.StripPrefix under a prefix. Every page but /admin/ reads only this
// member's applied state and never writes.
func (n *Node) Handler(o HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.serveHealth)
	mux.HandleFunc("GET /readyz", n.serveReady)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.statusReport(r.Context()))
	})
	mux.HandleFunc("GET /{$}", n.servePage)
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	if o.Admin {
		mux.Handle("/admin/", requireToken(o.Token, n.adminMux()))
	}
	return mux
}

func (n *Node) serveHealth(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-n.Done():
		msg := "stopped"
		if err := n.Err(); err != nil {
			msg = "stopped: " + err.Error()
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

func (n *Node) serveReady(w http.ResponseWriter, _ *http.Request) {
	if reason := n.notReady(); reason != "" {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// notReady returns why the member is not ready, or "" when it is.
func (n *Node) notReady() string {
	select {
	case <-n.Done():
		if err := n.Err(); err != nil {
			return "member stopped: " + err.Error()
		}
		return "member stopped"
	default:
	}
	st := n.Status()
	switch {
	case st.Leader == "":
		return fmt.Sprintf("no leader known (term %d)", st.Term)
	case !n.caughtUp.Load():
		return fmt.Sprintf("catching up: applied index %d, not yet the leader's commit index since it started", st.Applied)
	case st.Applied < st.Commit:
		return fmt.Sprintf("applied index %d behind commit index %d", st.Applied, st.Commit)
	}
	if gap := n.outOfContact(); gap > 0 {
		return fmt.Sprintf("no contact with the leader for %v", gap.Round(time.Millisecond))
	}
	return ""
}

// readyPoll is how often Ready looks again: the conditions have no event
// of their own to wait on, and reading Status costs nothing.
const readyPoll = 10 * time.Millisecond

// Ready waits until the member is ready to serve, the condition /readyz
// reports: it knows a leader, has caught up (applied the commit index
// the leader had when this member first asked it, by a read index, after
// Open: so a member that joined, or restarted behind, is not ready while
// it replays the log or installs a snapshot), has applied every entry it
// knows committed, and is in contact with the leader (heard it within
// two election timeouts). A member that stopped is never ready: Ready
// then returns errs.Closed, or the error that stopped it (errs.Removed for a
// removed member). When ctx ends first it returns errs.NotReady wrapping
// ctx's error, with the unmet condition.
func (n *Node) Ready(ctx context.Context) error {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		reason := n.notReady()
		if reason == "" {
			return nil
		}
		select {
		case <-n.Done():
			if err := n.Err(); err != nil {
				return err
			}
			return errs.Closed
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", errs.NotReady, reason, ctx.Err())
		case <-t.C:
		}
	}
}

// StatusReport is what /status serves: this member's view of itself and
// of the cell.
type StatusReport struct {
	Member    string         `json:"member"`
	Role      raftnode.Role  `json:"role"`
	Term      uint64         `json:"term"`
	Leader    string         `json:"leader"`
	Commit    uint64         `json:"commit_index"`
	Applied   uint64         `json:"applied_index"`
	LastIndex uint64         `json:"last_index"`
	Revision  int64          `json:"revision"`
	Ready     bool           `json:"ready"`
	NotReady  string         `json:"not_ready,omitempty"`
	Members   []MemberHealth `json:"members"`
	Sessions  int            `json:"sessions"`
	// Autopilot is the autopilot's last decision on this member and why;
	// null when the cell runs no autopilot (no gossip).
	Autopilot *Decision `json:"autopilot"`
}

// Member health as the leader sees it (the root's HealthHealthy...).
const (
	healthHealthy     = "healthy"     // answered the leader within an election timeout
	healthUnreachable = "unreachable" // did not
	healthUnknown     = "unknown"     // this member does not lead, so cannot tell
)

// MemberHealth is one member as /status shows it.
type MemberHealth struct {
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	ID      uint64 `json:"id"`
	Role    string `json:"role"` // "voter" or "learner"
	Leader  bool   `json:"leader"`
	Health  string `json:"health"`
	Match   uint64 `json:"match_index,omitempty"` // known only to the leader
	Current bool   `json:"this_member"`
}

// replicationWait bounds how long a status page waits for the Raft loop
// to report replication progress: a busy or stopping loop must not hang
// the page.
const replicationWait = time.Second

// statusReport gathers the report from this member's own state only.
func (n *Node) statusReport(ctx context.Context) StatusReport {
	st := n.Status()
	rep := StatusReport{
		Member: st.Name, Role: st.Role, Term: st.Term, Leader: st.Leader,
		Commit: st.Commit, Applied: st.Applied, LastIndex: st.LastIndex,
		Revision: st.Revision,
	}
	if n.gossip != nil {
		rep.Autopilot = &st.Autopilot
	}
	rep.NotReady = n.notReady()
	rep.Ready = rep.NotReady == ""
	if ss, err := n.sm.Sessions(); err == nil {
		rep.Sessions = len(ss)
	}
	rep.Members = n.memberHealth(ctx, st)
	return rep
}

func (n *Node) memberHealth(ctx context.Context, st Status) []MemberHealth {
	ms, err := n.members()
	if err != nil {
		return nil
	}
	var prs map[uint64]progress
	if st.Role == raftnode.RoleLeader {
		prs = n.replication(ctx)
	}
	out := make([]MemberHealth, 0, len(ms))
	for _, m := range ms {
		h := MemberHealth{Name: m.Name, Addr: m.Addr, ID: m.ID, Role: "voter",
			Leader: m.Name == st.Leader, Health: healthUnknown, Current: m.Name == st.Name}
		if m.Learner {
			h.Role = "learner"
		}
		if pr, ok := prs[m.ID]; ok {
			h.Match = pr.match
			h.Health = healthUnreachable
			if pr.active {
				h.Health = healthHealthy
			}
		} else if h.Leader || (h.Current && st.Leader != "") {
			// A follower hears from the leader, and is itself alive.
			h.Health = healthHealthy
		}
		out = append(out, h)
	}
	return out
}

type progress struct {
	match  uint64
	active bool
}

// replication returns the leader's view of each member, or nil when this
// member does not lead or its loop does not answer in time.
func (n *Node) replication(ctx context.Context) map[uint64]progress {
	ctx, cancel := context.WithTimeout(ctx, replicationWait)
	defer cancel()
	prs, _, ok, err := n.raft.Replication(ctx)
	if err != nil || !ok {
		return nil
	}
	out := make(map[uint64]progress, len(prs))
	for id, pr := range prs {
		out[id] = progress{match: pr.Match, active: pr.RecentActive}
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the client may be gone; nothing to do about it
}

// requireToken lets a request through only with the bearer token, when
// one is set. The comparison takes the same time whatever the guess.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="coord"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
