package coordcell

import (
	"errors"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/cell"
)

// classify names a coord error by the sentinel it wraps. ErrAmbiguous
// comes first: it wraps its cause (ErrClosed, a context's error) too.
func classify(err error) cell.ErrorClass {
	switch {
	case errors.Is(err, coord.ErrAmbiguous):
		return cell.ClassAmbiguous
	case errors.Is(err, coord.ErrNoQuorum):
		return cell.ClassNoLeader
	case errors.Is(err, coord.ErrTimeout):
		return cell.ClassTimedOut
	case errors.Is(err, coord.ErrClosed), errors.Is(err, cell.ErrStopped):
		return cell.ClassStopped
	}
	return cell.ClassOther
}

// Classify names err by the coord sentinel it wraps.
func (c *Cell) Classify(err error) cell.ErrorClass { return classify(err) }

// Classify names err by the coord sentinel it wraps.
func (m *Member) Classify(err error) cell.ErrorClass { return classify(err) }

// Leads reports whether the member leads.
func (m *Member) Leads() bool { return m.n.Status().Role == coord.RoleLeader }

var (
	_ cell.Classifier = (*Cell)(nil)
	_ cell.Classifier = (*Member)(nil)
	_ cell.Leads      = (*Member)(nil)
)
