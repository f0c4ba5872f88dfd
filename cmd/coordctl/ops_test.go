package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// lineWriter hands each line written to it to a channel, so a test can
// wait for the watch's output without polling a buffer.
type lineWriter struct {
	buf   bytes.Buffer
	lines chan string
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line) // an unfinished line waits for its end
			return len(p), nil
		}
		l.lines <- strings.TrimSuffix(line, "\n")
	}
}

func TestCoordctlTxnWatchRevoke(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	n := c.Node((c.LeaderIndex() + 1) % 3) // a follower forwards as well
	srv := httptest.NewServer(n.Handler(coord.WithAdmin("")))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append([]string{"--endpoint", srv.URL}, args...), &out, io.Discard)
		return out.String(), err
	}

	// A watch after the current revision, started before the writes: its
	// output arrives line by line while it runs.
	after := strconv.FormatInt(n.Status().Revision, 10)
	wctx, stopWatch := context.WithCancel(ctx)
	lw := &lineWriter{lines: make(chan string, 16)}
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- run(wctx, []string{"--endpoint", srv.URL, "--json", "watch", "cfg/", after}, lw, io.Discard)
	}()

	_, err := ctl("put", "cfg/a", "1")
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "txn.json")
	write := func(body string) {
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	}
	write(`{"if": [{"key": "cfg/a", "target": "version", "op": "=", "int": 1}],
	        "then": [{"op": "put", "key": "cfg/a", "value": "2"}, {"op": "put", "key": "cfg/b", "value": "x"}],
	        "else": [{"op": "get", "key": "cfg/a"}]}`)
	out, err := ctl("--json", "txn", file)
	require.NoError(t, err)
	var res coord.TxnResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.True(t, res.Succeeded)
	// The same transaction again: the version moved, so Else runs and
	// reads the key.
	out, err = ctl("--json", "txn", file)
	require.NoError(t, err)
	res = coord.TxnResult{}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.False(t, res.Succeeded)
	require.Len(t, res.Results, 1)
	require.Equal(t, "2", string(res.Results[0].KVs[0].Value))
	out, err = ctl("txn", file)
	require.NoError(t, err)
	require.Contains(t, out, "else")

	// A bad file is refused before anything is sent, and a bad target by
	// the member, clearly.
	write(`{"if": [`)
	_, err = ctl("txn", file)
	require.ErrorIs(t, err, errUsage)
	write(`{"if": [{"key": "cfg/a", "target": "colour", "op": "="}]}`)
	_, err = ctl("txn", file)
	var apiErr *apiError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.Status)
	require.Contains(t, apiErr.Msg, "colour")

	// The watch saw the put and both keys of the transaction, in order.
	var seen []coord.Event
	for len(seen) < 3 {
		select {
		case line := <-lw.lines:
			var ev coord.Event
			require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
			seen = append(seen, ev)
		case <-ctx.Done():
			t.Fatalf("watch printed %d events of 3", len(seen))
		}
	}
	require.Equal(t, "cfg/a", seen[0].KV.Key)
	require.Equal(t, []string{"cfg/a", "cfg/b"}, []string{seen[1].KV.Key, seen[2].KV.Key})
	require.Equal(t, seen[1].Rev, seen[2].Rev, "one transaction, one revision")
	stopWatch()
	require.NoError(t, <-watchDone)

	// A watch after an old revision replays what followed it, as a
	// table, until its timeout.
	var table bytes.Buffer
	err = run(ctx, []string{"--endpoint", srv.URL, "--timeout", "2s", "watch", "cfg/", "0"}, &table, io.Discard)
	require.NoError(t, err)
	sc := bufio.NewScanner(&table)
	require.True(t, sc.Scan())
	require.Contains(t, sc.Text(), "PUT")

	// Revoking a session ends it in the cell: its lock is released and
	// its process hears of it.
	s, err := n.NewSession(ctx)
	require.NoError(t, err)
	_, err = coord.NewMutex(s, "job").Lock(ctx)
	require.NoError(t, err)
	_, err = ctl("sessions", "revoke", strconv.FormatInt(int64(s.ID()), 10))
	require.NoError(t, err)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the revoked session did not end")
	}
	out, err = ctl("--json", "locks")
	require.NoError(t, err)
	require.JSONEq(t, "null", out)
	_, err = ctl("sessions", "revoke", strconv.FormatInt(int64(s.ID()), 10))
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 404, apiErr.Status)
	_, err = ctl("sessions", "revoke", "nope")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.Status)

	_, err = ctl("compact")
	require.ErrorIs(t, err, errUsage)
	srv.CloseClientConnections()
}

func TestCoordctlHelp(t *testing.T) {
	var errOut bytes.Buffer
	err := run(context.Background(), []string{"-h"}, io.Discard, &errOut)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, cmd := range []string{"status", "members add-learner", "watch", "txn FILE", "sessions revoke", "locks", "snapshot save"} {
		require.Contains(t, errOut.String(), cmd)
	}
}
