package attack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/coordcell/coord/internal/clientwire"
)

// raw is a client connection spoken frame by frame, the way an attacker
// who read the protocol's documentation (package clientwire's doc) would:
// it sends what it likes and reads only when it chooses to.
type raw struct {
	c       net.Conn
	version uint8
	welcome *clientwire.Welcome
	nextID  uint64
}

// rawMaxFrame is the largest frame an attacker says it accepts: the
// protocol's field allows 4 GiB, and the member must not believe it.
const rawMaxFrame = 1 << 31

// readLimit bounds a frame the attacker reads (it reads only small ones).
const readLimit = 64 << 20

// handshakeLimit bounds a raw connection's dial and handshake.
const handshakeLimit = 10 * time.Second

// dialRaw connects to addr as name (plaintext: the name is the
// identity) and completes the handshake.
func dialRaw(ctx context.Context, addr, name string) (*raw, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeLimit)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	hello := &clientwire.Hello{MinVersion: clientwire.MinVersion, MaxVersion: clientwire.MaxVersion,
		Name: name, MaxFrame: rawMaxFrame - 1}
	b, err := clientwire.AppendFrame(nil, 0, 0, hello, 4<<10)
	if err == nil {
		_, err = c.Write(b)
	}
	var m clientwire.Message
	if err == nil {
		m, _, err = readFrame(c, 4<<10)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	c.SetDeadline(time.Time{})
	switch w := m.(type) {
	case *clientwire.Welcome:
		return &raw{c: c, version: w.Version, welcome: w}, nil
	case *clientwire.Refuse:
		c.Close()
		return nil, fmt.Errorf("refused (%d): %s", w.Reason, w.Message)
	}
	c.Close()
	return nil, fmt.Errorf("handshake answered with a %T", m)
}

// request sends m as a request with the next ID and returns the ID.
func (r *raw) request(m clientwire.Message) (uint64, error) {
	r.nextID++
	return r.nextID, r.send(r.nextID, m)
}

// send writes one frame of m with id (0 for one-way frames).
func (r *raw) send(id uint64, m clientwire.Message) error {
	b, err := clientwire.AppendFrame(nil, r.version, id, m, rawMaxFrame)
	if err != nil {
		return err
	}
	_, err = r.c.Write(b)
	return err
}

// read reads the next frame within d.
func (r *raw) read(d time.Duration) (clientwire.Message, uint64, error) {
	r.c.SetReadDeadline(time.Now().Add(d))
	defer r.c.SetReadDeadline(time.Time{})
	return readFrame(r.c, readLimit)
}

// Close closes the connection.
func (r *raw) Close() error { return r.c.Close() }

// readFrame reads one whole frame from c and decodes its message.
func readFrame(c io.Reader, maxFrame int) (clientwire.Message, uint64, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > maxFrame {
		return nil, 0, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, 4+n)
	copy(b, hdr[:])
	if _, err := io.ReadFull(c, b[4:]); err != nil {
		return nil, 0, err
	}
	f, err := clientwire.ParseFrame(b, n)
	if err != nil {
		return nil, 0, err
	}
	m, err := clientwire.DecodeMessage(f.Kind, f.Payload)
	return m, f.ID, err
}

// keepAliveFrame builds, from the protocol's documented layout, one
// KeepAlive frame of frameLen bytes after its length prefix whose session
// IDs take one byte each (ID 1: zigzag varint 0x02). It is built by hand:
// through the codec, n IDs would cost 8n bytes to hold first.
func keepAliveFrame(version uint8, frameLen int) []byte {
	const header = 1 + 1 + 8 // version, kind, request ID
	seq := binary.AppendUvarint(nil, 1)
	n := frameLen - header - len(seq)
	for n > 0 && n+len(binary.AppendUvarint(nil, uint64(n))) > frameLen-header-len(seq) {
		n--
	}
	b := make([]byte, 0, 4+frameLen)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = append(b, version, byte(clientwire.KindKeepAlive))
	b = binary.BigEndian.AppendUint64(b, 0)
	b = append(b, seq...)
	b = binary.AppendUvarint(b, uint64(n))
	for range n {
		b = append(b, 0x02)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// errClosedByPeer says whether err is the member closing the connection.
func errClosedByPeer(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}
