package adminrpc

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMuxRoutesByChannel(t *testing.T) {
	type got struct {
		from string
		data string
	}
	var sessions, admin []got
	rec := &logRecorder{}
	m := NewMux(slog.New(rec), map[Channel]Handler{
		ChannelSessions: func(from string, data []byte) { sessions = append(sessions, got{from, string(data)}) },
		ChannelAdmin:    func(from string, data []byte) { admin = append(admin, got{from, string(data)}) },
	})
	m.Deliver("a", Frame(ChannelSessions, []byte("ka")))
	m.Deliver("b", Frame(ChannelAdmin, []byte("req")))
	m.Deliver("c", Frame(ChannelAdmin, nil))
	require.Equal(t, []got{{"a", "ka"}}, sessions)
	require.Equal(t, []got{{"b", "req"}, {"c", ""}}, admin)

	// What this member does not understand is dropped and logged.
	m.Deliver("d", nil)
	m.Deliver("e", []byte{'Z', 1, 2})
	require.Len(t, sessions, 1)
	require.Len(t, admin, 2)
	require.Contains(t, rec.text(), "empty application message from=d")
	require.Contains(t, rec.text(), "unknown channel from=e channel=90")
}

func TestFrameCopies(t *testing.T) {
	buf := []byte("abc")
	f := Frame(ChannelAdmin, buf[:2])
	buf[0] = 'x'
	require.Equal(t, []byte("Aab"), f)
	require.Equal(t, []byte{byte(ChannelAdmin)}, Frame(ChannelAdmin, nil))
}
