package coordcell

import (
	"context"
	"errors"

	"github.com/coordcell/coord"
	"github.com/coordcell/coord/bench/internal/cell"
)

// session adapts a coord.Session to cell.Session.
type session struct{ s *coord.Session }

// NewMutex returns coord's fair mutex on name.
func (s *session) NewMutex(name string) cell.Mutex {
	return &mutex{m: coord.NewMutex(s.s, name)}
}

// NewElection returns a campaigner in coord's election group.
func (s *session) NewElection(group string) cell.Election {
	return &election{e: coord.NewElection(s.s, group)}
}

// Expired reports whether the cell expired the session.
func (s *session) Expired() bool { return errors.Is(s.s.Err(), coord.ErrSessionExpired) }

// Orphan stops the keep-alives; the cell expires the session after its TTL.
func (s *session) Orphan() { s.s.Orphan() }

// Close ends the session in the cell.
func (s *session) Close(ctx context.Context) error { return s.s.Close(ctx) }

type mutex struct{ m *coord.Mutex }

func (m *mutex) Lock(ctx context.Context) error {
	_, err := m.m.Lock(ctx)
	return err
}

func (m *mutex) Unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

type election struct{ e *coord.Election }

func (e *election) Campaign(ctx context.Context, value string) error {
	_, err := e.e.Campaign(ctx, value)
	return err
}

func (e *election) Resign(ctx context.Context) error { return e.e.Resign(ctx) }
