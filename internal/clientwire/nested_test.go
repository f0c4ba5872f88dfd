package clientwire

import (
	"context"
	"errors"
	"testing"

	"github.com/coordcell/coord/internal/command"
)

func TestNestedResultNeedsVersion6(t *testing.T) {
	f := Frame{Version: 5, Kind: KindNestedResult, ID: 1}
	if err := checkFrame(f, 5); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a nested result in version 5: %v", err)
	}
	f.Version = 6
	if err := checkFrame(f, 6); err != nil {
		t.Fatalf("in version 6: %v", err)
	}
}

// TestNestedResultDepthBounded: no payload makes the decoder recurse
// deeper than transactions nest.
func TestNestedResultDepthBounded(t *testing.T) {
	deep := &ProposeResult{Nested: true, Result: command.Result{Ops: []command.OpResult{{}}}}
	op := &deep.Result.Ops[0]
	for range command.MaxNesting + 1 {
		op.Txn = &command.TxnResult{Ops: []command.OpResult{{}}}
		op = &op.Txn.Ops[0]
	}
	if _, err := DecodeMessage(KindNestedResult, AppendMessage(nil, deep)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("nested %d deep: %v", command.MaxNesting+1, err)
	}
	// Markers other than 0 and 1 are refused too.
	b := AppendMessage(nil, &ProposeResult{Nested: true, Result: command.Result{Ops: []command.OpResult{{}}}})
	b[len(b)-1] = 2
	if _, err := DecodeMessage(KindNestedResult, b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("marker 2: %v", err)
	}
}

// TestNestedCommandNeedsVersion6: a client refuses to send a nested
// transaction to a member of version 5, sending nothing, and the
// connection stays.
func TestNestedCommandNeedsVersion6(t *testing.T) {
	c := connToOldMember(t, 5)
	cmd, err := command.Encode(&command.Command{Kind: command.KindTxn, Txn: &command.Txn{
		Then: []command.Op{{Type: command.OpTxn, Txn: &command.Txn{}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Propose(context.Background(), cmd); !errors.Is(err, ErrVersion) {
		t.Fatalf("a nested transaction to a version 5 member: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the connection closed")
	default:
	}
}
