package proposer

import (
	"testing"

	"github.com/coordcell/coord/internal/testmain"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestWindowFloor(t *testing.T) {
	w := NewWindow()
	s1, f := w.Take()
	require.EqualValues(t, 1, s1)
	require.EqualValues(t, 1, f)
	s2, _ := w.Take()
	s3, f := w.Take()
	require.EqualValues(t, 3, s3)
	require.EqualValues(t, 1, f)
	w.Done(s2)
	require.EqualValues(t, 1, w.Floor(), "1 still waits")
	w.Done(s1)
	require.EqualValues(t, 3, w.Floor(), "past 1 and 2")
	w.Done(s3)
	require.EqualValues(t, 4, w.Floor())
	w.Done(s3) // twice is harmless
	require.EqualValues(t, 4, w.Floor())
}

func TestWindowPinned(t *testing.T) {
	w := NewWindow()
	first, _ := w.Take()
	w.Pin(first)
	for range MaxPinned - 1 {
		s, _ := w.Take()
		w.Pin(s)
	}
	require.EqualValues(t, 1, w.Floor(), "the pinned keep the floor")
	s, _ := w.Take()
	w.Pin(s) // pushes the first out
	require.EqualValues(t, 2, w.Floor())
}

func TestNewID(t *testing.T) {
	require.NotZero(t, NewID())
	require.NotEqual(t, NewID(), NewID())
}
