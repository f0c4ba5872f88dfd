package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/require"
)

// fakeAdmin answers status and put as a member's admin endpoint would,
// for token "tok" only, and records the puts it was sent.
type fakeAdmin struct {
	mu   sync.Mutex
	puts map[string]string
}

func (f *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]string{"error": "bad token"})
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/admin/status":
		json.NewEncoder(w).Encode(coord.StatusReport{Member: "m1", Role: "leader", Ready: true})
	case r.Method == http.MethodPut && r.URL.Path == "/admin/kv":
		key := r.URL.Query().Get("key")
		val, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.puts[key] = string(val)
		f.mu.Unlock()
		json.NewEncoder(w).Encode(coord.KV{Key: key, Value: val, Version: 1})
	default:
		http.NotFound(w, r)
	}
}

// TestFlagsAfterCommand: flags may come before or after the command (and
// between its arguments); "--" ends them, and "-" or a negative number is
// an argument, not a flag.
func TestFlagsAfterCommand(t *testing.T) {
	fake := &fakeAdmin{puts: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, args, &out, &errOut)
		return out.String(), err
	}

	for _, args := range [][]string{
		{"--endpoint", srv.URL, "--token", "tok", "status"},
		{"status", "--endpoint", srv.URL, "--token", "tok"},
		{"status", "--endpoint=" + srv.URL, "-token=tok"},
		{"--endpoint", srv.URL, "status", "--token", "tok"},
	} {
		out, err := ctl(args...)
		require.NoError(t, err, "%q", args)
		require.Contains(t, out, "m1", "%q", args)
		require.NotContains(t, out, "{", "%q: a table", args)
	}
	out, err := ctl("status", "--json", "--endpoint", srv.URL, "--token", "tok")
	require.NoError(t, err)
	var rep coord.StatusReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "m1", rep.Member)

	// Flags between the arguments; values that start with a dash.
	_, err = ctl("put", "--endpoint", srv.URL, "k1", "v1", "--token", "tok")
	require.NoError(t, err)
	_, err = ctl("put", "k2", "-5", "--endpoint", srv.URL, "--token", "tok")
	require.NoError(t, err)
	_, err = ctl("--endpoint", srv.URL, "--token", "tok", "put", "--", "k3", "--json")
	require.NoError(t, err)
	_, err = ctl("put", "-", "dash", "--endpoint", srv.URL, "--token", "tok")
	require.NoError(t, err)
	fake.mu.Lock()
	require.Equal(t, map[string]string{"k1": "v1", "k2": "-5", "k3": "--json", "-": "dash"}, fake.puts)
	fake.mu.Unlock()

	// An unknown flag after the command is refused as before it, and the
	// token given after the command is the one used.
	_, err = ctl("status", "--endpoint", srv.URL, "--bogus")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "bogus"), err.Error())
	_, err = ctl("status", "--endpoint", srv.URL, "--token", "bad")
	var apiErr *apiError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)
}
