package adminrpc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func seedMessages() []*Message {
	return []*Message{
		{Req: &Request{ID: 1, Op: OpPromote, Name: "n4"}},
		{Req: &Request{ID: 1 << 63, Op: "future-op", Name: ""}},
		{Reply: &Reply{ID: 7}},
		{Reply: &Reply{ID: 8, Code: "not-caught-up", Msg: "coord: learner has not caught up"}},
	}
}

func TestAdminWireRoundTrip(t *testing.T) {
	for _, m := range seedMessages() {
		b, err := Encode(m)
		require.NoError(t, err)
		require.Equal(t, Version, b[0], "the version leads the payload")
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
}

// body returns a versioned payload around raw msgpack.
func body(raw ...byte) []byte { return append([]byte{Version}, raw...) }

func TestAdminWireRefusesHostilePayloads(t *testing.T) {
	good, err := Encode(&Message{Req: &Request{ID: 3, Op: OpPromote, Name: "n4"}})
	require.NoError(t, err)
	both, err := msgpack.Marshal(&Message{Req: &Request{ID: 1}, Reply: &Reply{ID: 1}})
	require.NoError(t, err)
	neither, err := msgpack.Marshal(&Message{})
	require.NoError(t, err)
	longReply, err := msgpack.Marshal(&Message{Reply: &Reply{Msg: string(make([]byte, maxReplyMsg+1))}})
	require.NoError(t, err)
	huge := make([]byte, MaxMessageSize+1)
	huge[0] = Version
	for name, tc := range map[string]struct {
		data []byte
		want error
	}{
		"empty":             {nil, ErrMalformed},
		"version only":      {[]byte{Version}, ErrMalformed},
		"version zero":      {append([]byte{0}, good[1:]...), ErrVersion},
		"a newer version":   {append([]byte{Version + 1}, good[1:]...), ErrVersion},
		"truncated":         {good[:len(good)-2], ErrMalformed},
		"trailing bytes":    {append(append([]byte{}, good...), 0xc0), ErrMalformed},
		"too large":         {huge, ErrMalformed},
		"str32 of 4 GiB":    {body(0x81, 0xa1, 'q', 0x81, 0xa1, 'n', 0xdb, 0xff, 0xff, 0xff, 0xff), ErrMalformed},
		"map32 of 4G pairs": {body(0xdf, 0xff, 0xff, 0xff, 0xff), ErrMalformed},
		"array32 claimed":   {body(0x81, 0xa1, 'q', 0xdd, 0x7f, 0xff, 0xff, 0xff), ErrMalformed},
		"wrong type":        {body(0x81, 0xa1, 'q', 0xa3, 'a', 'b', 'c'), ErrMalformed},
		"not a map":         {body(0x2a), ErrMalformed},
		"both":              {body(both...), ErrMalformed},
		"neither":           {body(neither...), ErrMalformed},
		"long reply":        {body(longReply...), ErrMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Decode(tc.data)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, m)
		})
	}
}

func TestAdminWireEncodeRefusesWhatDecodeWould(t *testing.T) {
	_, err := Encode(&Message{})
	require.ErrorIs(t, err, ErrMalformed)
	_, err = Encode(&Message{Req: &Request{Name: string(make([]byte, MaxMessageSize))}})
	require.ErrorIs(t, err, ErrMalformed)
	// A long reply message is cut to fit rather than lose the reply.
	long := &Reply{ID: 1, Code: "other", Msg: string(make([]byte, 2*MaxMessageSize))}
	b, err := Encode(&Message{Reply: long})
	require.NoError(t, err)
	m, err := Decode(b)
	require.NoError(t, err)
	require.Len(t, m.Reply.Msg, maxReplyMsg)
	require.Len(t, long.Msg, 2*MaxMessageSize, "the caller's reply is left alone")
}

// FuzzDecode: no input panics Decode, and whatever it accepts encodes back
// to a payload that decodes to the same message.
func FuzzDecode(f *testing.F) {
	for _, m := range seedMessages() {
		b, err := Encode(m)
		require.NoError(f, err)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{Version + 1, 0x80})
	f.Add(body(0xdf, 0xff, 0xff, 0xff, 0xff))
	f.Add(body(0x81, 0xa1, 'q', 0x81, 0xa1, 'n', 0xdb, 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrVersion", err)
			}
			return
		}
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("accepted %x but cannot encode it: %v", data, err)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", data, err)
		}
		require.Equal(t, m, again)
	})
}
