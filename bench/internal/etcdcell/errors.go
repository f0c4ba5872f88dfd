package etcdcell

import (
	"errors"
	"strings"

	"github.com/coordcell/coord/bench/internal/cell"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// classify names an etcd error by its description, which is the same
// whether it came through gRPC or v3client's in-process adapters.
func classify(err error) cell.ErrorClass {
	if errors.Is(err, cell.ErrStopped) {
		return cell.ClassStopped
	}
	switch desc := rpctypes.ErrorDesc(err); {
	case desc == rpctypes.ErrLeaderChanged.Error():
		return cell.ClassLeaderChanged
	case desc == rpctypes.ErrNoLeader.Error():
		return cell.ClassNoLeader
	case strings.HasPrefix(desc, rpctypes.ErrTimeout.Error()): // the "possibly due to ..." ones too
		return cell.ClassTimedOut
	case desc == rpctypes.ErrStopped.Error():
		return cell.ClassStopped
	}
	return cell.ClassOther
}

// Classify names err by etcd's description of it.
func (c *Cell) Classify(err error) cell.ErrorClass { return classify(err) }

// Classify names err by etcd's description of it.
func (m *Member) Classify(err error) cell.ErrorClass { return classify(err) }

// Leads reports whether the member's server leads.
func (m *Member) Leads() bool { return m.e.Server.Leader() == m.e.Server.MemberID() }

var (
	_ cell.Classifier     = (*Cell)(nil)
	_ cell.Classifier     = (*Member)(nil)
	_ cell.Leads          = (*Member)(nil)
	_ cell.GracefulCloser = (*Member)(nil)
)
