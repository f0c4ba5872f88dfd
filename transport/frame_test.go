package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	envs := []Envelope{
		{From: "a", To: "b", Data: []byte("hello")},
		{From: "a", To: "b", Data: nil},
		{From: "a", To: "b", Data: []byte{}},
		{From: "c", To: "b", Data: bytes.Repeat([]byte{7}, 100<<10)},
	}
	for _, env := range envs {
		buf, err := encodeFrame(env.From, env.To, env.Data, DefaultMaxFrameSize)
		require.NoError(t, err)
		stream.Write(buf.Bytes())
		putFrameBuf(buf)
	}
	fr := newFrameReader(&stream, DefaultMaxFrameSize)
	for _, want := range envs {
		got, err := fr.next()
		require.NoError(t, err)
		assert.Equal(t, want.From, got.From)
		assert.Equal(t, want.To, got.To)
		assert.Equal(t, len(want.Data), len(got.Data))
		assert.True(t, bytes.Equal(want.Data, got.Data))
	}
	_, err := fr.next()
	assert.Equal(t, io.EOF, err)
}

func TestEncodeFrameLimit(t *testing.T) {
	_, err := encodeFrame("a", "b", make([]byte, 100), 50)
	require.ErrorIs(t, err, ErrFrameTooLarge)
	// Fits as data, not once the frame's own bytes are added.
	_, err = encodeFrame("a", "b", make([]byte, 98), 100)
	require.ErrorIs(t, err, ErrFrameTooLarge)
}

// raceEnabled is set by race_test.go.
var raceEnabled bool

func TestEncodeFrameAllocFree(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool is randomised under the race detector")
	}
	data := make([]byte, 512)
	allocs := testing.AllocsPerRun(100, func() {
		buf, err := encodeFrame("member-1", "member-2", data, DefaultMaxFrameSize)
		if err != nil {
			panic(err)
		}
		putFrameBuf(buf)
	})
	assert.Zero(t, allocs)
}

func TestReadFrameLyingLength(t *testing.T) {
	// A header that claims the whole limit, then a handful of bytes: the
	// reader must not allocate the claimed size up front.
	in := binary.BigEndian.AppendUint32(nil, DefaultMaxFrameSize)
	in = append(in, 0x94, 0x01)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := newFrameReader(bytes.NewReader(in), DefaultMaxFrameSize).next()
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))

	// Over the limit: refused from the header alone.
	in = binary.BigEndian.AppendUint32(nil, DefaultMaxFrameSize+1)
	r := bytes.NewReader(append(in, 1, 2, 3))
	_, err = newFrameReader(r, DefaultMaxFrameSize).next()
	require.ErrorIs(t, err, ErrFrameTooLarge)
	assert.Equal(t, 3, r.Len(), "read past the header")
}

func TestReadFrameMalformed(t *testing.T) {
	frame := func(body ...byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := map[string][]byte{
		"empty frame":        frame(),
		"not an array":       frame(0xa1, 'x'),
		"empty array":        frame(0x90),
		"version 0":          frame(0x94, 0x00, 0xa0, 0xa0, 0xc0),
		"version 2":          frame(0x94, 0x02, 0xa0, 0xa0, 0xc0),
		"three fields":       frame(0x93, 0x01, 0xa0, 0xa0),
		"name not a string":  frame(0x94, 0x01, 0x05, 0xa0, 0xc0),
		"data past the end":  frame(0x94, 0x01, 0xa0, 0xa0, 0xc4, 0x09, 'x'),
		"name past the end":  frame(0x94, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff, 0xa0, 0xc0),
		"trailing bytes":     frame(0x94, 0x01, 0xa0, 0xa0, 0xc0, 0x00),
		"truncated msgpack":  frame(0x94, 0x01),
		"reserved type code": frame(0xc1),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := newFrameReader(bytes.NewReader(in), 1<<10).next()
			require.ErrorIs(t, err, ErrMalformedFrame)
		})
	}
}

func FuzzReadFrame(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzReadFrame.
	for _, env := range []Envelope{
		{From: "a", To: "b", Data: []byte("hello")},
		{From: "", To: "", Data: nil},
	} {
		buf, err := encodeFrame(env.From, env.To, env.Data, DefaultMaxFrameSize)
		require.NoError(f, err)
		f.Add(bytes.Clone(buf.Bytes()))
		putFrameBuf(buf)
	}
	const maxSize = 1 << 12
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameReader(bytes.NewReader(in), maxSize)
		for {
			env, err := fr.next()
			if err != nil {
				ok := err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) ||
					errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformedFrame)
				require.True(t, ok, "unexpected error: %v", err)
				return
			}
			require.LessOrEqual(t, len(env.From)+len(env.To)+len(env.Data), maxSize)
			require.LessOrEqual(t, cap(env.Data), maxSize)
			// What was read must encode back to a frame that reads the same.
			buf, err := encodeFrame(env.From, env.To, env.Data, maxSize)
			require.NoError(t, err)
			got, err := newFrameReader(bytes.NewReader(buf.Bytes()), maxSize).next()
			putFrameBuf(buf)
			require.NoError(t, err)
			require.Equal(t, env.From, got.From)
			require.Equal(t, env.To, got.To)
			require.True(t, bytes.Equal(env.Data, got.Data))
		}
	})
}
