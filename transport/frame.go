package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire format. Each frame is a 4-byte big-endian length n, then n bytes
// holding one msgpack array [V, From, To, Data]. V leads so that a node
// can refuse a frame from a newer format before reading anything else
// (invariant 10 of ARCHITECTURE.md).
const (
	// FrameVersion is the format version written in every frame. Frames
	// with any other version are refused.
	FrameVersion = 1
	// DefaultMaxFrameSize is the frame size limit when TCPConfig leaves
	// MaxFrameSize at zero.
	DefaultMaxFrameSize = 16 << 20

	frameHeaderLen = 4
	frameFields    = 4
	// pooledFrameMax keeps the odd huge frame from pinning its buffer in
	// the pool for the life of the process.
	pooledFrameMax = 64 << 10
	// frameReadChunk is how much a reader allocates before the bytes of
	// a large frame actually arrive, so a header that lies about its
	// length cannot make us allocate the limit for nothing.
	frameReadChunk = 64 << 10
)

var (
	frameBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	encoderPool  = sync.Pool{New: func() any { return msgpack.NewEncoder(nil) }}
	zeroHeader   [frameHeaderLen]byte
	// detached is what pooled encoders point at, so they do not keep a
	// frame buffer alive. Nothing writes to it. Reset(nil) would be
	// simpler but allocates a wrapper in some msgpack versions.
	detached = new(bytes.Buffer)
)

// encodeFrame encodes one frame, length prefix included, into a buffer
// from frameBufPool; the caller hands it back with putFrameBuf once
// written. Pooling both the buffer and the encoder makes the steady state
// allocation-free, and encoding on the sender's goroutine also gives the
// sender the copy of Data it must make anyway.
func encodeFrame(from, to string, data []byte, maxSize int) (*bytes.Buffer, error) {
	if len(from)+len(to)+len(data) > maxSize {
		// Cannot fit whatever the overhead: refuse before encoding a
		// huge frame only to throw it away. The exact check follows.
		return nil, fmt.Errorf("%w: %d bytes of data, limit %d", ErrFrameTooLarge, len(data), maxSize)
	}
	buf := frameBufPool.Get().(*bytes.Buffer)
	buf.Reset()
	buf.Write(zeroHeader[:])
	enc := encoderPool.Get().(*msgpack.Encoder)
	enc.Reset(buf)
	err := enc.EncodeArrayLen(frameFields)
	if err == nil {
		err = enc.EncodeUint8(FrameVersion)
	}
	if err == nil {
		err = enc.EncodeString(from)
	}
	if err == nil {
		err = enc.EncodeString(to)
	}
	if err == nil {
		err = enc.EncodeBytes(data)
	}
	enc.Reset(detached)
	encoderPool.Put(enc)
	if err != nil {
		putFrameBuf(buf)
		return nil, err
	}
	n := buf.Len() - frameHeaderLen
	if n > maxSize {
		putFrameBuf(buf)
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxSize)
	}
	binary.BigEndian.PutUint32(buf.Bytes()[:frameHeaderLen], uint32(n))
	return buf, nil
}

func putFrameBuf(buf *bytes.Buffer) {
	if buf.Cap() <= pooledFrameMax {
		frameBufPool.Put(buf)
	}
}

// frameReader reads frames from one connection. It is not safe for
// concurrent use; each connection's reader goroutine owns one.
type frameReader struct {
	r       io.Reader
	maxSize int
	// guard, when set, is told of each frame and each allocation for
	// it, and may refuse them.
	guard frameGuard
	hdr   [frameHeaderLen]byte
	body  bytes.Reader
	dec   *msgpack.Decoder
	// The last names seen. A connection carries one sender and one
	// receiver, so reusing them saves two string allocations per frame.
	from, to string
}

// frameGuard lets a connection bound what its frames cost beyond the
// size limit: time to complete, and memory shared with other
// connections. An error from either method ends the read with it.
type frameGuard interface {
	// begin is called with a frame's length once its prefix arrived.
	begin(n int) error
	// grow is called before n more bytes are allocated for the frame.
	grow(n int) error
}

func newFrameReader(r io.Reader, maxSize int) *frameReader {
	return &frameReader{r: r, maxSize: maxSize, dec: msgpack.NewDecoder(nil)}
}

// next reads one frame. It returns io.EOF at a clean end of stream, an
// error wrapping ErrFrameTooLarge or ErrMalformedFrame for bad input, or
// the read error. It never allocates more than the frame's length, and
// checks that length against the limit before allocating anything.
// Envelope.Data aliases a buffer allocated for this frame alone, so the
// receiver owns it.
func (fr *frameReader) next() (Envelope, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return Envelope{}, err
	}
	n := int64(binary.BigEndian.Uint32(fr.hdr[:]))
	if n > int64(fr.maxSize) {
		return Envelope{}, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, fr.maxSize)
	}
	if n == 0 {
		return Envelope{}, fmt.Errorf("%w: empty frame", ErrMalformedFrame)
	}
	if fr.guard != nil {
		if err := fr.guard.begin(int(n)); err != nil {
			return Envelope{}, err
		}
	}
	body, err := fr.readBody(int(n))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Envelope{}, err
	}
	return fr.decode(body)
}

// readBody reads exactly n bytes, growing the buffer as bytes arrive
// rather than trusting n up front.
func (fr *frameReader) readBody(n int) ([]byte, error) {
	r := fr.r
	size := min(n, frameReadChunk)
	if err := fr.grown(size); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	for len(b) < n {
		size := min(n, 2*len(b))
		if err := fr.grown(size - len(b)); err != nil {
			return nil, err
		}
		nb := make([]byte, size)
		copy(nb, b)
		if _, err := io.ReadFull(r, nb[len(b):]); err != nil {
			return nil, err
		}
		b = nb
	}
	return b, nil
}

func (fr *frameReader) grown(n int) error {
	if fr.guard == nil {
		return nil
	}
	return fr.guard.grow(n)
}

func (fr *frameReader) decode(body []byte) (Envelope, error) {
	fr.body.Reset(body)
	fr.dec.Reset(&fr.body)
	// Let go of the frame without re-pointing the decoder: msgpack wraps
	// a reader that is not an io.ByteScanner (nil included) in a new 4 KiB
	// bufio.Reader, which on every frame was most of our garbage.
	defer fr.body.Reset(nil)
	fields, err := fr.dec.DecodeArrayLen()
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrMalformedFrame, err)
	}
	if fields < 1 {
		return Envelope{}, fmt.Errorf("%w: %d fields", ErrMalformedFrame, fields)
	}
	// Version first: a newer format may have a different shape, and its
	// sender deserves "unknown version" rather than a parse error.
	v, err := fr.dec.DecodeUint64()
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: version: %v", ErrMalformedFrame, err)
	}
	if v != FrameVersion {
		return Envelope{}, fmt.Errorf("%w: unknown format version %d", ErrMalformedFrame, v)
	}
	if fields != frameFields {
		return Envelope{}, fmt.Errorf("%w: %d fields, want %d", ErrMalformedFrame, fields, frameFields)
	}
	var env Envelope
	if env.From, err = fr.name(body, &fr.from); err != nil {
		return Envelope{}, fmt.Errorf("%w: from: %v", ErrMalformedFrame, err)
	}
	if env.To, err = fr.name(body, &fr.to); err != nil {
		return Envelope{}, fmt.Errorf("%w: to: %v", ErrMalformedFrame, err)
	}
	if env.Data, err = fr.bytes(body); err != nil {
		return Envelope{}, fmt.Errorf("%w: data: %v", ErrMalformedFrame, err)
	}
	if rest := fr.body.Len(); rest != 0 {
		return Envelope{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformedFrame, rest)
	}
	return env, nil
}

// bytes returns the next str or bin value as a slice of body, after
// checking its declared length against what is left, so a lying length
// costs nothing.
func (fr *frameReader) bytes(body []byte) ([]byte, error) {
	n, err := fr.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 { // nil
		return nil, nil
	}
	if n > fr.body.Len() {
		return nil, fmt.Errorf("length %d past end of frame", n)
	}
	off := len(body) - fr.body.Len()
	if _, err := fr.body.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return body[off : off+n : off+n], nil
}

// name is bytes as a string, reusing *last when equal.
func (fr *frameReader) name(body []byte, last *string) (string, error) {
	b, err := fr.bytes(body)
	if err != nil {
		return "", err
	}
	if string(b) != *last { // compiles to a comparison, no allocation
		*last = string(b)
	}
	return *last, nil
}
