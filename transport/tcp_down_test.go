package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// downs collects what a transport reports through OnPeerDown.
func downs(tr *TCP) chan string {
	ch := make(chan string, 64)
	tr.OnPeerDown(func(peer string) {
		select {
		case ch <- peer:
		default:
		}
	})
	return ch
}

// linked starts a and b and has each send to the other, so that a
// connection is open each way.
func linked(t *testing.T, cfg TCPConfig) (a, b *TCP) {
	t.Helper()
	cfg.Name = "a"
	a = listen(t, cfg)
	cfg.Name = "b"
	b = listen(t, cfg)
	connect(map[string]*TCP{"a": a, "b": b})
	sendUntil(t, a, b, Envelope{To: "b", Data: []byte("ab")})
	sendUntil(t, b, a, Envelope{To: "a", Data: []byte("ba")})
	return a, b
}

func TestTCPReportsPeerWhoseProcessDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TCPConfig
	}{
		{"plaintext", TCPConfig{}},
		{"tls", TCPConfig{Secret: []byte("a shared secret of enough bytes!")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := linked(t, tc.cfg)
			fromA, fromB := downs(a), downs(b)
			require.True(t, b.Connected("a"))
			require.True(t, a.Connected("b"))
			require.False(t, b.Connected("nobody"))

			// A dying process's sockets are closed by its kernel, as Close
			// closes a's.
			require.NoError(t, a.Close())
			select {
			case peer := <-fromB:
				require.Equal(t, "a", peer)
			case <-time.After(waitFor):
				t.Fatal("b never heard that a's connections closed")
			}
			deadline := time.Now().Add(waitFor)
			for b.Connected("a") {
				require.True(t, time.Now().Before(deadline), "b still counts a connection with a")
				time.Sleep(time.Millisecond)
			}
			// a closed its own connections: nothing to report. Close has
			// waited for every goroutine that could have.
			require.Empty(t, fromA)
		})
	}
}

func TestTCPDoesNotReportConnectionsItClosesItself(t *testing.T) {
	a, b := linked(t, TCPConfig{})
	fromA, fromB := downs(a), downs(b)
	// b drops a: b cut the connections, so b reports nothing; to a, its
	// peer closed them.
	b.RemovePeer("a")
	select {
	case peer := <-fromA:
		require.Equal(t, "b", peer)
	case <-time.After(waitFor):
		t.Fatal("a never heard that b cut its connections")
	}
	require.False(t, b.Connected("a"))
	require.NoError(t, b.Close())
	require.Empty(t, fromB)
}
