package coord_test

import (
	"net"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestNodeAddr: a member opened on port 0 reports the address its TCP
// transport bound, which accepts connections; an in-memory member reports
// Config.Addr.
func TestNodeAddr(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	n, err := coord.Open(ctx, coord.Config{Name: "solo", Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer n.Close()
	host, port, err := net.SplitHostPort(n.Admin().Addr())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", n.Admin().Addr())
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	// coordtest names its in-memory members n0, n1, ..., with their
	// names as addresses.
	c := coordtest.NewCluster(t, 1)
	require.Equal(t, "n0", c.Node(0).Admin().Addr())
}
