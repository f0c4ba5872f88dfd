package transport

import (
	"bytes"
	"testing"
)

// BenchmarkFrameRead reads 512-byte frames from memory: the decode cost
// of the receive path, without the network.
func BenchmarkFrameRead(b *testing.B) {
	buf, err := encodeFrame("member-1", "member-2", make([]byte, 512), DefaultMaxFrameSize)
	if err != nil {
		b.Fatal(err)
	}
	frame := bytes.Clone(buf.Bytes())
	putFrameBuf(buf)
	stream := bytes.Repeat(frame, 1024)
	r := bytes.NewReader(stream)
	fr := newFrameReader(r, DefaultMaxFrameSize)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1024 == 0 {
			r.Reset(stream)
		}
		if _, err := fr.next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPSendReceive sends 512-byte envelopes between two members
// over loopback in batches of 64 and waits for each batch: the steady
// state of the send and receive paths together. The only allocation per
// envelope should be its received Data.
func BenchmarkTCPSendReceive(b *testing.B) {
	a, err := ListenTCP(TCPConfig{Name: "a", Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c, err := ListenTCP(TCPConfig{Name: "c", Addr: "127.0.0.1:0", Peers: map[string]string{"a": a.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	a.AddPeer("c", c.Addr())
	const batch = 64
	envs := make([]Envelope, batch)
	for i := range envs {
		envs[i] = Envelope{To: "c", Data: make([]byte, 512)}
	}
	// Warm up the connection.
	if err := a.Send(envs[:1]); err != nil {
		b.Fatal(err)
	}
	<-c.Receive()
	b.SetBytes(512 * batch)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Send(envs); err != nil {
			b.Fatal(err)
		}
		for range batch {
			<-c.Receive()
		}
	}
}
