package coord_test

import (
	"testing"
	"time"

	"github.com/coordcell/coord/coordtest"
	"github.com/stretchr/testify/require"
)

// TestStatusMembersMatchMembers: Status, which reads memory only, names
// the same members as Members, which reads the replicated state, on
// every member.
func TestStatusMembersMatchMembers(t *testing.T) {
	t.Parallel()
	c := coordtest.NewCluster(t, 3)
	ctx := ctxT(t, 20*time.Second)
	for i := range 3 {
		ms, err := c.Node(i).Admin().Members(ctx)
		require.NoError(t, err)
		var names []string
		for _, m := range ms {
			names = append(names, m.Name)
		}
		require.Eventually(t, func() bool {
			return slicesEqual(c.Node(i).Status().Members, names)
		}, 10*time.Second, 5*time.Millisecond, "member %d: Status %v, Members %v", i, c.Node(i).Status().Members, names)
	}
}

// BenchmarkStatus measures Status, which coordtest polls every few ms.
func BenchmarkStatus(b *testing.B) {
	c := coordtest.NewCluster(b, 3)
	n := c.Node(0)
	b.ReportAllocs()
	for b.Loop() {
		_ = n.Status()
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
