package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

func TestCoordctlAgainstAMember(t *testing.T) {
	c := coordtest.NewCluster(t, 3)
	n := c.Leader()
	srv := httptest.NewServer(n.Handler(coord.WithAdmin("tok")))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ctl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"--endpoint", srv.URL, "--token", "tok"}, args...), &out, &errOut)
		return out.String(), err
	}

	out, err := ctl("put", "app/x", "hello")
	require.NoError(t, err)
	require.Contains(t, out, "app/x")
	out, err = ctl("--json", "get", "app/x")
	require.NoError(t, err)
	var kv coord.KV
	require.NoError(t, json.Unmarshal([]byte(out), &kv))
	require.Equal(t, "hello", string(kv.Value))
	require.Equal(t, int64(1), kv.Version)

	s, err := n.NewSession(ctx)
	require.NoError(t, err)
	tok, err := coord.NewMutex(s, "db").Lock(ctx)
	require.NoError(t, err)
	out, err = ctl("locks")
	require.NoError(t, err)
	require.Regexp(t, `db\s*\|holder\s*\|`, out)
	require.Contains(t, out, tok.String())
	out, err = ctl("--json", "locks")
	require.NoError(t, err)
	var locks []coord.LockReport
	require.NoError(t, json.Unmarshal([]byte(out), &locks))
	require.Len(t, locks, 1)
	require.Equal(t, tok, locks[0].Queue[0].Token)

	out, err = ctl("--json", "sessions")
	require.NoError(t, err)
	var ss []coord.SessionReport
	require.NoError(t, json.Unmarshal([]byte(out), &ss))
	require.Len(t, ss, 1)
	require.Equal(t, s.ID(), ss[0].ID)

	out, err = ctl("status")
	require.NoError(t, err)
	require.Contains(t, out, n.Status().Name)
	out, err = ctl("members")
	require.NoError(t, err)
	require.Equal(t, 4, strings.Count(out, "\n"), out)

	file := filepath.Join(t.TempDir(), "backup.coord")
	_, err = ctl("snapshot", "save", file)
	require.NoError(t, err)
	f, err := os.Open(file)
	require.NoError(t, err)
	info, kvs, err := coord.ReadBackup(f)
	f.Close()
	require.NoError(t, err)
	require.Equal(t, len(kvs), info.Keys)

	_, err = ctl("del", "app/x")
	require.NoError(t, err)
	_, err = ctl("get", "app/x")
	var apiErr *apiError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 404, apiErr.Status)

	// A wrong token and an unknown command are refused clearly.
	err = run(ctx, []string{"--endpoint", srv.URL, "--token", "bad", "status"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 401, apiErr.Status)
	_, err = ctl("frobnicate")
	require.ErrorIs(t, err, errUsage)
	require.NoError(t, s.Close(ctx))
	srv.CloseClientConnections()
}
