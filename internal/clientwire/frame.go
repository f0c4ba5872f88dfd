package clientwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Protocol versions this build speaks.
const (
	MinVersion uint8 = 1
	// MaxVersion 2 adds TimeToLive, 3 adds Members, 4 paged reads
	// (KindReadPage), 5 ranged reads (KindReadRange), 6 nested
	// transactions (KindNestedResult) and 7 connection-wide progress
	// (KindWatchesCurrent); their frames are the only differences, so an
	// older peer is served exactly as before.
	MaxVersion uint8 = 7
)

// handshakeVersion is the version byte of Hello, Welcome and Refuse
// frames, whose layout never changes, so that builds of any versions can
// agree on one.
const handshakeVersion uint8 = 0

// Frame sizes.
const (
	// DefaultMaxFrame is the default bound on a frame's length.
	DefaultMaxFrame = 4 << 20
	// MinMaxFrame is the smallest bound either end may set: room for any
	// handshake and a useful request.
	MinMaxFrame = 64 << 10
	// DefaultQueueBytes is the default bound on the bytes a member queues
	// for one client unwritten (Limits.QueueBytes).
	DefaultQueueBytes = 16 << 20
	// MaxKeepAliveIDs bounds the session IDs of one KeepAlive (and of the
	// merge of those waiting): one ID can take a single byte, so the
	// count, not the frame's length, bounds what decoding one allocates
	// (8 bytes an ID: 1 MiB).
	MaxKeepAliveIDs = 1 << 17
	// handshakeMaxFrame bounds the frames read before the handshake ends,
	// so an unauthenticated peer cannot make a member allocate much.
	handshakeMaxFrame = 4 << 10
	// lenSize is the length prefix; headerSize is what follows it before
	// the payload: version, kind, ID.
	lenSize    = 4
	headerSize = 1 + 1 + 8
	// growStep is how much a frame buffer grows per read beyond the first:
	// a peer that announces a long frame and sends little makes the reader
	// allocate only what arrived.
	growStep = 64 << 10
)

// Frame is one decoded frame header with its raw payload.
type Frame struct {
	Version uint8
	Kind    Kind
	ID      uint64
	Payload []byte
}

// AppendFrame appends the frame of m (version, kind, ID) to b and checks
// its length against maxFrame; on ErrFrameTooLarge b is returned unchanged.
func AppendFrame(b []byte, version uint8, id uint64, m Message, maxFrame int) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, version, byte(m.Kind()))
	b = binary.BigEndian.AppendUint64(b, id)
	b = m.appendTo(b)
	n := len(b) - start - lenSize
	if n > maxFrame {
		return b[:start], fmt.Errorf("%w: kind %d of %d bytes, limit %d", ErrFrameTooLarge, m.Kind(), n, maxFrame)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// frameReader reads frames from a connection through one buffered reader
// (one per connection, for its life).
type frameReader struct {
	r *bufio.Reader
	// started, when set, is called once a frame's length has been read
	// and the rest has not all arrived yet: the member bounds how long
	// the rest may take.
	started func(n int)
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// read reads one frame of at most maxFrame bytes. The length is checked
// before anything is allocated, and the buffer grows with the bytes that
// actually arrive. A frame that does not parse is ErrProtocol, a long one
// ErrFrameTooLarge; an I/O error is returned as is (io.EOF for a clean end
// between frames).
func (fr *frameReader) read(maxFrame int) (Frame, error) {
	var lb [lenSize]byte
	if _, err := io.ReadFull(fr.r, lb[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if uint64(n) > uint64(maxFrame) {
		return Frame{}, fmt.Errorf("%w: %d bytes announced, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	if n < headerSize {
		return Frame{}, fmt.Errorf("%w: frame of %d bytes is shorter than its header", ErrProtocol, n)
	}
	size := int(n)
	if fr.started != nil && fr.r.Buffered() < size {
		fr.started(size)
	}
	buf := make([]byte, 0, min(size, growStep))
	for len(buf) < size {
		chunk := min(size-len(buf), growStep)
		buf = slices.Grow(buf, chunk)
		if _, err := io.ReadFull(fr.r, buf[len(buf):len(buf)+chunk]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		buf = buf[:len(buf)+chunk]
	}
	return Frame{
		Version: buf[0],
		Kind:    Kind(buf[1]),
		ID:      binary.BigEndian.Uint64(buf[2:]),
		Payload: buf[headerSize:],
	}, nil
}

// ParseFrame splits one whole frame (length prefix included) into its
// header and payload, as the reader does; for tests and tools.
func ParseFrame(b []byte, maxFrame int) (Frame, error) {
	fr := newFrameReader(&sliceReader{b: b})
	f, err := fr.read(maxFrame)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return Frame{}, fmt.Errorf("%w: truncated frame", ErrProtocol)
	}
	return f, err
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// checkFrame verifies the frame's version and kind, and that its ID is
// present exactly where the kind needs one.
func checkFrame(f Frame, version uint8) error {
	if f.Kind == 0 || f.Kind > maxKind || (version < 2 && f.Kind > maxKindV1) ||
		(version < MembersVersion && f.Kind > KindTimeToLiveResult) ||
		(version < PageVersion && f.Kind > KindMembersResult) ||
		(version < RangeVersion && f.Kind > KindReadPage) ||
		(version < NestedVersion && f.Kind > KindRangeResult) ||
		(version < CurrentVersion && f.Kind > KindNestedResult) {
		return fmt.Errorf("%w: unknown kind %d in version %d", ErrProtocol, f.Kind, version)
	}
	want := version
	if f.Kind == KindHello || f.Kind == KindWelcome || f.Kind == KindRefuse {
		want = handshakeVersion
	}
	if f.Version != want {
		return fmt.Errorf("%w: frame version %d, expected %d", ErrVersion, f.Version, want)
	}
	if (f.ID != 0) != hasID(f.Kind) {
		return fmt.Errorf("%w: kind %d with request ID %d", ErrProtocol, f.Kind, f.ID)
	}
	return nil
}

// hasID reports whether frames of kind k carry a request ID.
func hasID(k Kind) bool {
	switch k {
	case KindPing, KindPong, KindPropose, KindProposeResult, KindRead, KindReadResult,
		KindWatchStart, KindOK, KindError, KindCancel, KindTimeToLive, KindTimeToLiveResult,
		KindMembers, KindMembersResult, KindReadPage, KindReadRange, KindRangeResult, KindNestedResult:
		return true
	}
	return false
}
