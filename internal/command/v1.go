package command

import (
	"fmt"

	"github.com/coordcell/coord/internal/mpcheck"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeMsgpack reads format 1, which builds before format 2 wrote.
func decodeMsgpack(data []byte) (*Command, error) {
	if err := mpcheck.Check(data); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var c Command
	if err := msgpack.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c.Kind < KindTxn || c.Kind > maxKindV1 {
		return nil, fmt.Errorf("%w: kind %d", ErrMalformed, c.Kind)
	}
	return &c, nil
}
