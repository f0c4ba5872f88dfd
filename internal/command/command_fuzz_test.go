package command

import (
	"bytes"
	"errors"
	"testing"

	"github.com/coordcell/coord/internal/mpcheck"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// fuzzSeedCommands covers every kind and every field, for the fuzzer to
// start from and for the exact round trip below. Empty slices are left
// nil so that format 1 (whose omitempty cannot tell the two apart) gives
// these back exactly too.
func fuzzSeedCommands() []*Command {
	return []*Command{
		{ID: 1, Kind: KindNoop},
		{ID: 0, Kind: KindSessionCreate, Session: &Session{TTL: 10e9}},
		{ID: 1 << 63, Kind: KindSessionEnd, Session: &Session{ID: 42, Expired: true}},
		{ID: 7, Kind: KindTxn, Txn: &Txn{
			If: []Compare{
				{Key: "locks/a/1", Target: TargetCreateRev, Op: Less, Int: -5},
				{Key: "cfg", Target: TargetValue, Op: NotEqual, Value: []byte{0, 1, 0xff}},
				{Key: "k", Target: TargetSession, Op: Equal},
			},
			Then: []Op{
				{Type: OpPut, Key: "k", Value: []byte("v"), Session: 9},
				{Type: OpDelete, Key: "prefix/", Prefix: true},
			},
			Else: []Op{{Type: OpGet, Key: "", Prefix: true}},
		}},
		{ID: 3, Kind: KindSessionEnd, Session: &Session{ID: 42, Expired: true, Term: 9}},
		{ID: 4, Kind: KindSessionCreate, Session: &Session{TTL: 10e9, Owner: "client:a", Charged: true, MaxSessions: 4096}},
		{ID: 5, Kind: KindSessionSilent, Session: &Session{Term: 9, Clock: 3e9, Credits: []Credit{{ID: 42, Nanos: 1e9}}}},
		{ID: 6, Kind: KindTxn, Txn: &Txn{
			Then:      []Op{{Type: OpPut, Key: "locks/a/2", Session: 9}, {Type: OpGet, Key: "locks/a/", Prefix: true}},
			ReadLimit: 4 << 20,
		}},
	}
}

func TestFuzzSeedCommandsRoundTrip(t *testing.T) {
	for _, c := range fuzzSeedCommands() {
		b, err := Encode(c)
		require.NoError(t, err)
		require.Equal(t, wantVersion(c), b[0])
		got, err := Decode(b)
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
}

// TestDecodeHugeArrayHeader is a regression test for a command that
// declares 2^32-1 ops in 23 bytes. msgpack v5.4.0 and v5.4.1 allocate the
// declared length up front when decoding into a slice of structs (their
// sliceAllocLimit check is a no-op: vmihailenco/msgpack#401), so Decode
// dies with "fatal error: out of memory" instead of failing cleanly.
// v5.3.6, which go.mod pins for this reason, caps the preallocation.
func TestDecodeHugeArrayHeader(t *testing.T) {
	data := append([]byte{versionMsgpack}, "\x82\xa4kind\x01\xa3txn\x81\xa4then\xdd\xff\xff\xff\xff"...)
	_, err := Decode(data)
	require.ErrorIs(t, err, ErrMalformed)
}

// FuzzDecode feeds arbitrary bytes to Decode: it must fail cleanly or
// return a command that survives Encode and Decode unchanged. More seeds,
// of both formats, live in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, c := range fuzzSeedCommands() {
		b, err := Encode(c)
		require.NoError(f, err)
		f.Add(b)
		f.Add(encodeV1(f, c))
	}
	f.Add([]byte{})
	f.Add([]byte{Version + 1, 0x80})
	f.Add(append([]byte{versionMsgpack}, "\x82\xa4kind\x01\xa3txn\x81\xa4then\xdd\xff\xff\xff\xff"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if len(data) > 0 && data[0] == versionMsgpack && mpcheck.Check(data[1:]) != nil {
			// What the check refuses, msgpack must refuse too, or an old
			// log could stop applying. A fresh decoder, not Unmarshal's
			// pooled ones, so this input cannot grow them.
			var v Command
			require.Error(t, msgpack.NewDecoder(bytes.NewReader(data[1:])).Decode(&v), "mpcheck refused what msgpack reads")
		}
		if err != nil {
			require.Nil(t, c)
			require.True(t, errors.Is(err, ErrMalformed) || errors.Is(err, ErrVersion), "unexpected error: %v", err)
			return
		}
		enc, err := Encode(c)
		require.NoError(t, err)
		// Formats 2 to 6 have one encoding per command, so what decoded
		// is written back byte for byte.
		if data[0] >= versionBinary2 && data[0] <= Version {
			require.True(t, bytes.Equal(data, enc), "encoding not canonical:\n%x\n%x", data, enc)
		}
		again, err := Decode(enc)
		require.NoError(t, err)
		// Format 2 keeps nil and empty apart, so whatever format the
		// input was, the command comes back exactly.
		require.Equal(t, c, again)
	})
}
