package gossip

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestMetaClientAddr: a member's client address travels in its metadata,
// and a decoder of the shape before it (no ClientAddr) still reads the
// rest: the field is optional both ways.
func TestMetaClientAddr(t *testing.T) {
	in := Meta{Cell: 7, ID: 3, Incarnation: 9, Addr: "10.0.0.3:7000", Zone: "z1", ClientAddr: "10.0.0.3:7001"}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeMeta(b)
	if err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// The fields an older member knows, by their tags.
	var old struct {
		Cell        uint64 `msgpack:"c"`
		ID          uint64 `msgpack:"i"`
		Incarnation uint64 `msgpack:"n"`
		Addr        string `msgpack:"a"`
		Zone        string `msgpack:"z,omitempty"`
	}
	if err := msgpack.Unmarshal(b[1:], &old); err != nil {
		t.Fatalf("an older decoder: %v", err)
	}
	if old.Cell != 7 || old.ID != 3 || old.Incarnation != 9 || old.Addr != in.Addr || old.Zone != "z1" {
		t.Fatalf("an older decoder read %+v", old)
	}
	// An older member's metadata decodes here with no client address.
	ob, err := msgpack.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(append([]byte{metaVersion}, ob...))
	if err != nil || got.ClientAddr != "" || got.ID != 3 {
		t.Fatalf("older metadata: %+v, %v", got, err)
	}
}
