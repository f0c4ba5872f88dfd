package coord_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, path string, header ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestHandlerHealthReadyStatus(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	leader := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := leader.Put(ctx, "a", []byte("1"))
	require.NoError(t, err)

	for i := range c.Size() {
		require.NoError(t, c.Node(i).Ready(ctx))
		_, err := c.Node(i).Get(ctx, "a") // a read barrier: the put is applied here
		require.NoError(t, err)
		h := c.Node(i).Handler()
		code, body := get(t, h, "/healthz")
		require.Equal(t, http.StatusOK, code, body)
		code, body = get(t, h, "/readyz")
		require.Equal(t, http.StatusOK, code, body)
		code, body = get(t, h, "/status")
		require.Equal(t, http.StatusOK, code)
		var rep coord.StatusReport
		require.NoError(t, json.Unmarshal([]byte(body), &rep))
		require.Equal(t, c.Name(i), rep.Member)
		require.Equal(t, leader.Status().Name, rep.Leader)
		require.True(t, rep.Ready)
		require.Len(t, rep.Members, 3)
		require.GreaterOrEqual(t, rep.Revision, int64(1))
		// Only admin turns on /admin/, and nothing but what is asked for
		// is served.
		code, _ = get(t, h, "/admin/status")
		require.Equal(t, http.StatusNotFound, code)
		code, _ = get(t, h, "/metrics")
		require.Equal(t, http.StatusNotFound, code)
	}
	// The leader knows every member's health.
	_, body := get(t, leader.Handler(), "/status")
	var rep coord.StatusReport
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	for _, m := range rep.Members {
		require.Equal(t, coord.HealthHealthy, m.Health, m.Name)
	}
}

func TestReadyzWithoutQuorum(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	li := c.LeaderIndex()
	// A member cut off from the others loses its leader once its
	// election timeout passes; it then must say it is not ready, why,
	// and Ready must wait.
	other := (li + 1) % 3
	n := c.Node(other)
	// Ready first: until it has caught up (its first read barrier) a
	// member says so, which is not the point here.
	readyCtx, readyCancel := context.WithTimeout(context.Background(), 20*time.Second)
	require.NoError(t, n.Ready(readyCtx))
	readyCancel()
	c.Isolate(other)
	h := n.Handler()
	// Out of contact with the leader first ("no contact with the leader
	// for ..."), then, past its election timeout, without one.
	require.Eventually(t, func() bool {
		code, body := get(t, h, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "no leader")
	}, 20*time.Second, 10*time.Millisecond, "readyz never said the member has no leader")

	// A heartbeat the leader sent just before the cut can still arrive
	// late and show the leader for a moment: Ready is asked until it has
	// waited out its deadline on a member that knows no leader.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := n.Ready(ctx)
		return errors.Is(err, coord.ErrNotReady) && errors.Is(err, context.DeadlineExceeded)
	}, 20*time.Second, 10*time.Millisecond, "Ready waits, then says the member is not ready")

	c.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, n.Ready(ctx))
}

func TestHealthzAfterClose(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	n := c.Leader()
	h := n.Handler()
	require.NoError(t, n.Close())
	code, _ := get(t, h, "/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.ErrorIs(t, n.Ready(context.Background()), coord.ErrClosed)
}

// htmlTables parses the page leniently (HTML, not XML) and returns each
// table's rows of cell texts by table id.
func htmlTables(t *testing.T, page string) (map[string][][]string, map[string]string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(page))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	tables := map[string][][]string{}
	ids := map[string]string{}
	var table, id string
	var row []string
	var cell *strings.Builder
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			id = ""
			for _, a := range tok.Attr {
				if a.Name.Local == "id" {
					id = a.Value
					ids[id] = ""
				}
			}
			switch tok.Name.Local {
			case "table":
				table = id
			case "tr":
				row = nil
			case "td", "th":
				cell = &strings.Builder{}
			}
		case xml.CharData:
			if cell != nil {
				cell.Write(tok)
			}
			if id != "" {
				ids[id] += string(tok)
			}
		case xml.EndElement:
			switch tok.Name.Local {
			case "td", "th":
				row = append(row, strings.TrimSpace(cell.String()))
				cell = nil
			case "tr":
				tables[table] = append(tables[table], row)
			}
			id = ""
		}
	}
	return tables, ids
}

func TestHandlerPageShowsLocksElectionsSessions(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	n := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s1, err := n.NewSession(ctx)
	require.NoError(t, err)
	s2, err := n.NewSession(ctx)
	require.NoError(t, err)
	m1 := coord.NewMutex(s1, "jobs/<nightly>")
	tok, err := m1.Lock(ctx)
	require.NoError(t, err)
	// A second waiter queues behind the holder.
	lockCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := coord.NewMutex(s2, "jobs/<nightly>").Lock(lockCtx)
		waited <- err
	}()
	e := coord.NewElection(s2, "primary")
	_, err = e.Campaign(ctx, "host-b <b>")
	require.NoError(t, err)

	var tables map[string][][]string
	var ids map[string]string
	require.Eventually(t, func() bool {
		code, page := get(t, n.Handler(), "/")
		require.Equal(t, http.StatusOK, code)
		tables, ids = htmlTables(t, page)
		return len(tables["locks"]) == 3 // header, holder, waiter
	}, 20*time.Second, 20*time.Millisecond)

	require.Equal(t, string(coord.RoleLeader), ids["role"])
	require.Equal(t, n.Status().Name, ids["leader"])
	require.Len(t, tables["members"], 4)
	locks := tables["locks"]
	require.Equal(t, []string{"jobs/<nightly>", "holder"}, locks[1][:2], "names are shown escaped, not as markup")
	require.Equal(t, tok.String(), locks[1][4])
	require.Equal(t, "waiter 1", locks[2][1])
	el := tables["elections"]
	require.Len(t, el, 2)
	require.Equal(t, []string{"primary", "leader", "host-b <b>"}, el[1][:3])
	require.Len(t, tables["sessions"], 3)

	stopWaiting()
	require.ErrorIs(t, <-waited, context.Canceled)
	require.NoError(t, m1.Unlock(ctx))
	require.NoError(t, s1.Close(ctx))
	require.NoError(t, s2.Close(ctx))
}

func TestAdminRequiresToken(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1)
	h := c.Leader().Handler(coord.WithAdmin("s3cret"))
	code, _ := get(t, h, "/admin/status")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(t, h, "/admin/status", "Authorization", "Bearer wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(t, h, "/admin/status", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, code, body)
	// The read-only pages need no token.
	code, _ = get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
}

// TestAdminRefusesBadRequests sends the admin API what a confused or
// hostile client might: each gets a 400 with a reason and writes nothing.
func TestAdminRefusesBadRequests(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 1, coordtest.WithConfig(func(_ int, cfg *coord.Config) {
		// A small frame, so that a body past it is cheap to send.
		cfg.MaxTxnOps, cfg.MaxFrameSize = 16, 4<<20
	}))
	n := c.Leader()
	h := n.Handler(coord.WithAdmin(""))
	send := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	before := n.Status().Revision
	for _, tc := range []struct{ method, path, body, why string }{
		{"POST", "/admin/txn", `{"if": [`, "unexpected EOF"},
		{"POST", "/admin/txn", `{"then": [], "extra": 1}`, "unknown field"},
		{"POST", "/admin/txn", `{"then": [{"op": "rename", "key": "a"}]}`, "unknown operation"},
		{"POST", "/admin/txn", `{"if": [{"key": "a", "target": "version", "op": "~"}]}`, "unknown comparison"},
		{"POST", "/admin/txn", `{"then": [{"op": "put", "key": "a", "value": "` + strings.Repeat("x", 5<<20) + `"}]}`, "too large"},
		{"DELETE", "/admin/sessions/-3", "", "not a positive number"},
		{"GET", "/admin/watch?prefix=a&after=x", "", "not a revision"},
	} {
		code, body := send(tc.method, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, code, "%s %s: %s", tc.method, tc.path, body)
		require.Contains(t, body, tc.why)
	}
	require.Equal(t, before, n.Status().Revision, "nothing was written")
}

// TestInspectShowsLockDelay: a lock whose holder's session expired with
// a lock-delay shows as in lock-delay with no holder (the marker, its
// delay and revision), in the admin JSON and on the page; the waiter
// queued behind it is a waiter, not the holder.
func TestInspectShowsLockDelay(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	leader, key, rev := expireHolderWithMaxDelay(t, ctx, c, "delayed")
	n := c.Node(leader)
	ws := newSession(t, ctx, n, 10*electionTimeout)
	waitCtx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := coord.NewMutex(ws, "delayed").Lock(waitCtx)
		waited <- err
	}()
	defer func() {
		stop()
		require.ErrorIs(t, <-waited, context.Canceled)
	}()

	hd := n.Handler(coord.WithAdmin("tok"))
	var locks []coord.LockReport
	require.Eventually(t, func() bool {
		code, body := get(t, hd, "/admin/locks", "Authorization", "Bearer tok")
		require.Equal(t, http.StatusOK, code, body)
		locks = nil
		require.NoError(t, json.Unmarshal([]byte(body), &locks))
		return len(locks) == 1 && len(locks[0].Queue) == 1
	}, 30*time.Second, 10*time.Millisecond)
	l := locks[0]
	require.Equal(t, "delayed", l.Name)
	require.NotNil(t, l.LockDelay)
	require.Equal(t, coord.LockDelayReport{Key: key, Delay: coord.MaxLockDelay, Revision: rev}, *l.LockDelay)
	require.False(t, l.Held, "no holder during the delay")
	require.Equal(t, ws.ID(), l.Queue[0].Session, "the marker is not a queue entry")

	code, page := get(t, hd, "/")
	require.Equal(t, http.StatusOK, code)
	tables, _ := htmlTables(t, page)
	rows := tables["locks"]
	require.Len(t, rows, 3, "header, marker, waiter")
	require.Equal(t, "delayed", rows[1][0])
	require.Contains(t, rows[1][1], "lock-delay")
	require.Contains(t, rows[1][1], "no holder")
	require.Contains(t, rows[1][1], coord.MaxLockDelay.String())
	require.Contains(t, rows[1][1], "revision "+strconv.FormatInt(rev, 10))
	require.Equal(t, key, rows[1][2])
	require.Equal(t, []string{"delayed", "waiter 1"}, rows[2][:2])
	require.NotContains(t, page, ">holder<")
}
