package clientwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordcell/coord/internal/command"
)

// fakeHandler answers reads with the key, blocks on keys "block/…" until
// its context ends, and streams n events for a watch of prefix "n/".
type fakeHandler struct {
	blocked   chan string   // keys whose read began to block
	cancelled chan string   // keys whose blocked read saw its ctx end
	watchErr  chan error    // what each sink push loop ended with
	pushed    chan struct{} // a "n/" watch has pushed all its events
}

func newFake() *fakeHandler {
	return &fakeHandler{blocked: make(chan string, 100), cancelled: make(chan string, 100), watchErr: make(chan error, 10), pushed: make(chan struct{}, 10)}
}

func (f *fakeHandler) Welcome(identity string, h *Hello) (*Welcome, error) {
	if identity == "banned" {
		return nil, &RefusedError{Reason: RefuseForbidden, Message: "banned"}
	}
	return &Welcome{Member: "m1", CellID: 7, ElectionTimeout: time.Second, MinSessionTTL: 4 * time.Second}, nil
}

func (f *fakeHandler) Propose(ctx context.Context, identity string, c *command.Command) (*command.Result, error) {
	return &command.Result{Rev: 5, Succeeded: true, SessionID: SessionsNamed(c)[0]}, nil
}

func (f *fakeHandler) Read(ctx context.Context, identity string, r *Read) (*ReadResult, error) {
	if len(r.Key) > 6 && r.Key[:6] == "block/" {
		select {
		case f.blocked <- r.Key:
		default: // tests that block many reads do not wait on this
		}
		<-ctx.Done()
		f.cancelled <- r.Key
		return nil, ctx.Err()
	}
	if r.Key == "missing" {
		return nil, &Error{Code: CodeNotFound, Message: "no such key"}
	}
	return &ReadResult{KVs: []command.KV{{Key: r.Key, Value: []byte(identity)}}, Rev: 3}, nil
}

func (f *fakeHandler) Watch(ctx context.Context, identity string, w *WatchStart, sink *WatchSink) error {
	switch w.Prefix {
	case "n/": // ten events, then wait for the cancel
		for i := int64(1); i <= 10; i++ {
			ev := Event{Type: EventPut, KV: command.KV{Key: fmt.Sprintf("n/%d", i), ModRev: i}, EndOfRev: true}
			if err := sink.Events(i, []Event{ev}); err != nil {
				f.pushed <- struct{}{}
				return err
			}
		}
		f.pushed <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	case "flood/": // push until the sink refuses
		for i := int64(1); ; i++ {
			if err := sink.Progress(i); err != nil {
				f.watchErr <- err
				return err
			}
		}
	case "compacted/":
		return &WatchEndError{Code: CodeCompacted, Message: "compacted", CompactRev: 40}
	}
	<-ctx.Done()
	return ctx.Err()
}

func (f *fakeHandler) KeepAlive(ctx context.Context, identity string, ka *KeepAlive) (*KeepAliveAck, error) {
	return &KeepAliveAck{Confirmed: ka.SessionIDs[:1], Gone: []Gone{{ID: ka.SessionIDs[1], Code: CodeForbidden}}}, nil
}

func (f *fakeHandler) TimeToLive(ctx context.Context, identity string, q *TimeToLive) (*TimeToLiveResult, error) {
	if q.SessionID != 4 {
		return nil, &Error{Code: CodeSessionExpired, Message: "ended"}
	}
	return &TimeToLiveResult{Left: 3 * time.Second, TTL: 5 * time.Second}, nil
}

// serve runs Serve on one end of a pipe and returns the other end and
// Serve's result; the test's cleanup ends it and waits.
func serve(t *testing.T, h Handler, identity string, lim Limits) (net.Conn, <-chan error) {
	t.Helper()
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { res <- Serve(ctx, b, identity, h, lim) })
	t.Cleanup(func() {
		cancel()
		_ = a.Close()
		wg.Wait()
	})
	return a, res
}

func dial(t *testing.T, h Handler, identity string, lim Limits, opts ClientOptions) (*ClientConn, <-chan error) {
	t.Helper()
	conn, res := serve(t, h, identity, lim)
	c, err := Handshake(context.Background(), conn, opts)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, res
}

func TestHandshakeAndConcurrentCalls(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{MaxInFlight: 4}, ClientOptions{Name: "a"})
	w := c.Welcome()
	if w.Member != "m1" || w.CellID != 7 || w.Version != MaxVersion || w.MaxInFlight != 4 || w.MaxFrame != DefaultMaxFrame {
		t.Fatalf("welcome %+v", w)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i)
			r, err := c.Read(ctx, &Read{Key: key})
			if err == nil && (len(r.KVs) != 1 || r.KVs[0].Key != key || string(r.KVs[0].Value) != "alice") {
				err = fmt.Errorf("read %s: %+v", key, r)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(ctx, &Read{Key: "missing"})
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeNotFound {
		t.Fatalf("missing key: %v", err)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	conn, res := serve(t, newFake(), "banned", Limits{})
	_, err := Handshake(context.Background(), conn, ClientOptions{})
	var r *RefusedError
	if !errors.As(err, &r) || r.Reason != RefuseForbidden || !errors.Is(err, ErrRefused) {
		t.Fatalf("banned: %v", err)
	}
	if err := <-res; !errors.Is(err, ErrRefused) {
		t.Fatalf("Serve: %v", err)
	}

	// A client from the future speaks only versions past this build's.
	conn, res = serve(t, newFake(), "alice", Limits{})
	b, _ := AppendFrame(nil, 0, 0, &Hello{MinVersion: MaxVersion + 1, MaxVersion: MaxVersion + 2, MaxFrame: DefaultMaxFrame}, DefaultMaxFrame)
	go conn.Write(b)
	f, err := newFrameReader(conn).read(DefaultMaxFrame)
	if err != nil || f.Kind != KindRefuse {
		t.Fatalf("answer %+v, %v", f, err)
	}
	if err := <-res; !errors.Is(err, ErrVersion) {
		t.Fatalf("Serve: %v", err)
	}
}

func TestCancelledCallFreesItsSlot(t *testing.T) {
	h := newFake()
	c, _ := dial(t, h, "alice", Limits{MaxInFlight: 1}, ClientOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(ctx, &Read{Key: "block/1"})
		done <- err
	}()
	// The member runs the read, then the client gives up: the member's
	// handler sees its context end (the Cancel frame), the call returns.
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// With the one slot free again, another call goes through.
	if _, err := c.Read(context.Background(), &Read{Key: "k"}); err != nil {
		t.Fatal(err)
	}
}

func TestMemberSeesCancel(t *testing.T) {
	h := newFake()
	c, _ := dial(t, h, "alice", Limits{}, ClientOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(ctx, &Read{Key: "block/2"})
		done <- err
	}()
	// Cancel only once the member runs the read: cancelled before it is
	// sent, the read never reaches the member.
	if key := <-h.blocked; key != "block/2" {
		t.Fatalf("blocked %q", key)
	}
	cancel()
	if key := <-h.cancelled; key != "block/2" {
		t.Fatalf("cancelled %q", key)
	}
	<-done
}

func TestCloseEndsPendingCalls(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(context.Background(), &Read{Key: "block/3"})
		done <- err
	}()
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if err := <-done; !errors.Is(err, ErrConnClosed) {
		t.Fatalf("pending call after Close: %v", err)
	}
	if _, err := c.Read(context.Background(), &Read{Key: "k"}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestProposeAndForbiddenCommands(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
	ctx := context.Background()
	ok, _ := command.Encode(&command.Command{ID: 99, Kind: command.KindSessionEnd, Session: &command.Session{ID: 12}})
	r, err := c.Propose(ctx, ok)
	if err != nil || r.Result.SessionID != 12 || r.Result.Rev != 5 {
		t.Fatalf("propose: %+v, %v", r, err)
	}
	for _, cmd := range []*command.Command{
		{Kind: command.KindNoop},
		{Kind: command.KindSessionSeen, Session: &command.Session{IDs: []int64{1}}},
		{Kind: command.KindSessionEnd, Session: &command.Session{ID: 3, Expired: true}},
		{Kind: command.KindSessionEnd, Session: &command.Session{ID: 3, Term: 9}},
	} {
		b, _ := command.Encode(cmd)
		if _, err := c.Propose(ctx, b); !errors.Is(err, ErrForbidden) {
			t.Fatalf("%+v: %v", cmd, err)
		}
	}
	// A malformed command is a violation: the connection ends.
	if _, err := c.Propose(ctx, []byte{3, 1, 2}); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("malformed command: %v", err)
	}
}

// chanWatch starts a watch whose frames queue on a channel of size
// frames, closed once the watch has ended; a frame that finds it full
// ends the watch as slow.
func chanWatch(ctx context.Context, c *ClientConn, ws *WatchStart, size int) (*ClientWatch, <-chan Message, error) {
	ch := make(chan Message, size)
	w, err := c.Watch(ctx, ws, func(m Message) bool {
		select {
		case ch <- m:
			return true
		default:
			return false
		}
	})
	if err != nil {
		return nil, nil, err
	}
	go func() {
		<-w.Done()
		close(ch)
	}()
	return w, ch, nil
}

func TestWatchStream(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
	ctx := context.Background()
	w, events, err := chanWatch(ctx, c, &WatchStart{Prefix: "n/"}, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 10; i++ {
		m := (<-events).(*WatchEvents)
		if m.Rev != i || m.Events[0].KV.Key != fmt.Sprintf("n/%d", i) {
			t.Fatalf("event %d: %+v", i, m)
		}
	}
	w.Cancel()
	if _, open := <-events; open {
		t.Fatal("events after cancel")
	}
	if e := w.End(); e.Code != CodeNone || e.Rev != 10 {
		t.Fatalf("end %+v", e)
	}

	cw, cevents, err := chanWatch(ctx, c, &WatchStart{Prefix: "compacted/", FromRev: 3}, 256)
	if err != nil {
		t.Fatal(err)
	}
	for range cevents {
	}
	if e := cw.End(); e.Code != CodeCompacted || e.CompactRev != 40 || e.Rev != 2 {
		t.Fatalf("compacted end %+v", e)
	}
}

func TestTooManyWatchers(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{MaxWatchers: 2}, ClientOptions{})
	ctx := context.Background()
	for range 2 {
		if _, err := c.Watch(ctx, &WatchStart{Prefix: "idle/"}, func(Message) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Watch(ctx, &WatchStart{Prefix: "idle/"}, func(Message) bool { return true }); !errors.Is(err, ErrTooManyWatchers) {
		t.Fatalf("third watch: %v", err)
	}
}

func TestSlowConsumerLosesOnlyItsWatch(t *testing.T) {
	h := newFake()
	c, _ := dial(t, h, "alice", Limits{}, ClientOptions{})
	ctx := context.Background()
	w, events, err := chanWatch(ctx, c, &WatchStart{Prefix: "n/"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Once the member has queued all ten events (or stopped early, the
	// watch already ended), a Pong queued after them reaches the client
	// after them, so once Ping returns the client has dispatched them all
	// to a consumer that reads nothing: three fit, the fourth ended the
	// watch as slow.
	<-h.pushed
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var got int64
	for m := range events {
		got = m.(*WatchEvents).Rev
	}
	if e := w.End(); e.Code != CodeSlowWatcher || e.Rev != 3 || got != 3 {
		t.Fatalf("end %+v after rev %d", e, got)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("connection after a slow watch: %v", err)
	}
}

func TestMemberEndsWatchOfClientThatDoesNotRead(t *testing.T) {
	h := newFake()
	conn, _ := serve(t, h, "alice", Limits{WatchQueue: 4})
	fr := newFrameReader(conn)
	handshakeRaw(t, conn, fr)
	b, _ := AppendFrame(nil, 1, 1, &WatchStart{WatchID: 1, Prefix: "flood/"}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing more: the member's sink refuses once four
	// frames wait, instead of buffering without bound.
	if err := <-h.watchErr; !errors.Is(err, ErrWatchEnded) {
		t.Fatalf("sink: %v", err)
	}
}

// handshakeRaw does the client's handshake by hand, for hostile clients.
func handshakeRaw(t *testing.T, conn net.Conn, fr *frameReader) {
	t.Helper()
	b, _ := AppendFrame(nil, 0, 0, &Hello{MinVersion: 1, MaxVersion: 1, MaxFrame: DefaultMaxFrame}, DefaultMaxFrame)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if f, err := fr.read(DefaultMaxFrame); err != nil || f.Kind != KindWelcome {
		t.Fatalf("welcome: %+v, %v", f, err)
	}
}

func TestKeepAliveAck(t *testing.T) {
	acks := make(chan *KeepAliveAck, 10)
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{OnKeepAliveAck: func(a *KeepAliveAck) { acks <- a }})
	if err := c.KeepAlive(&KeepAlive{Seq: 7, SessionIDs: []int64{4, 5}}); err != nil {
		t.Fatal(err)
	}
	a := <-acks
	if a.Seq != 7 || len(a.Confirmed) != 1 || a.Confirmed[0] != 4 || a.Gone[0] != (Gone{ID: 5, Code: CodeForbidden}) {
		t.Fatalf("ack %+v", a)
	}
}

func TestTimeToLive(t *testing.T) {
	c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
	left, err := c.TimeToLive(context.Background(), 4)
	if err != nil || left != 3*time.Second {
		t.Fatalf("time to live: %v, %v", left, err)
	}
	res, err := c.AskTimeToLive(context.Background(), 4)
	if err != nil || res.Left != 3*time.Second || res.TTL != 5*time.Second {
		t.Fatalf("time to live with the granted TTL: %+v, %v", res, err)
	}
	_, err = c.TimeToLive(context.Background(), 5)
	var we *Error
	if !errors.As(err, &we) || we.Code != CodeSessionExpired {
		t.Fatalf("ended session: %v", err)
	}
}

// A member that speaks only version 1 is never sent a TimeToLive, which
// it would take for a protocol violation: the call fails with ErrVersion
// and the connection stays up.
func TestTimeToLiveNeedsVersion2(t *testing.T) {
	c := connToOldMember(t, 1)
	if _, err := c.TimeToLive(context.Background(), 4); !errors.Is(err, ErrVersion) {
		t.Fatalf("time to live of a version 1 member: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the connection closed")
	default:
	}
}

func TestFloodingClientIsRefusedWhileOthersAreServed(t *testing.T) {
	h := newFake()
	lim := Limits{MaxInFlight: 3}
	conn, _ := serve(t, h, "flood", lim)
	fr := newFrameReader(conn)
	handshakeRaw(t, conn, fr)
	// Ten reads that block, sent without waiting: three run, seven are
	// refused at once.
	var b []byte
	for i := range 10 {
		b, _ = AppendFrame(b, 1, uint64(i+1), &Read{Key: fmt.Sprintf("block/%d", i)}, DefaultMaxFrame)
	}
	go conn.Write(b)
	refused := 0
	for refused < 7 {
		f, err := fr.read(DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := DecodeMessage(f.Kind, f.Payload)
		if e, ok := m.(*ErrorMsg); !ok || e.Code != CodeTooManyRequests {
			t.Fatalf("frame %+v: %+v", f, m)
		}
		refused++
	}
	// Another client of the same member is served meanwhile.
	c, _ := dial(t, h, "bob", lim, ClientOptions{})
	if _, err := c.Read(context.Background(), &Read{Key: "k"}); err != nil {
		t.Fatal(err)
	}
}

func TestViolationClosesOnlyThatClient(t *testing.T) {
	h := newFake()
	good, _ := dial(t, h, "good", Limits{}, ClientOptions{})
	cases := []struct {
		name  string
		frame func() []byte
		want  error
	}{
		{"unknown kind", func() []byte {
			b, _ := AppendFrame(nil, 1, 1, &Read{}, DefaultMaxFrame)
			b[5] = 99
			return b
		}, ErrProtocol},
		{"wrong version", func() []byte { b, _ := AppendFrame(nil, 2, 1, &Read{}, DefaultMaxFrame); return b }, ErrVersion},
		{"huge length", func() []byte { return []byte{0x7f, 0xff, 0xff, 0xff} }, ErrFrameTooLarge},
		{"member-only kind", func() []byte { b, _ := AppendFrame(nil, 1, 1, &Pong{}, DefaultMaxFrame); return b }, ErrProtocol},
		{"bad payload", func() []byte {
			b, _ := AppendFrame(nil, 1, 1, &Read{Key: "abc"}, DefaultMaxFrame)
			b[lenSize+headerSize] = 0x7f // the key's length, beyond the frame
			return b
		}, ErrProtocol},
	}
	for _, c := range cases {
		conn, res := serve(t, h, "bad", Limits{})
		fr := newFrameReader(conn)
		handshakeRaw(t, conn, fr)
		go conn.Write(c.frame())
		if err := <-res; !errors.Is(err, c.want) {
			t.Fatalf("%s: Serve ended with %v, want %v", c.name, err, c.want)
		}
		if _, err := good.Read(context.Background(), &Read{Key: "k"}); err != nil {
			t.Fatalf("%s: the good client: %v", c.name, err)
		}
	}
}

// Calls whose contexts end while the connection closes: each returns
// (its context's error or ErrConnClosed), and -race sees no unguarded
// access to a call's state (Close used to read a call's abandoned mark
// outside the lock that Call writes it under).
func TestCloseWhileCallsGiveUp(t *testing.T) {
	for round := range 20 {
		c, _ := dial(t, newFake(), "alice", Limits{}, ClientOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 8)
		for i := range 8 {
			go func() {
				_, err := c.Read(ctx, &Read{Key: fmt.Sprintf("block/%d", 100+i)})
				done <- err
			}()
		}
		if err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		go cancel()
		_ = c.Close()
		for range 8 {
			if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, ErrConnClosed) {
				t.Fatalf("round %d: call ended with %v", round, err)
			}
		}
		cancel()
	}
}

// blockingKeepAlives holds each keep-alive until released, so a test can
// queue more behind it.
type blockingKeepAlives struct {
	*fakeHandler
	got     chan *KeepAlive
	release chan struct{}
}

func (b *blockingKeepAlives) KeepAlive(ctx context.Context, identity string, ka *KeepAlive) (*KeepAliveAck, error) {
	b.got <- ka
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &KeepAliveAck{Confirmed: ka.SessionIDs}, nil
}

// Keep-alives that arrive while one is being answered are merged, not
// dropped: a client's keep-alives of its new sessions alone must not
// replace the regular one listing all of them (found by bench's
// clients-sessions: thousands of sessions expired while being created).
func TestKeepAlivesQueuedBehindOneAreMerged(t *testing.T) {
	h := &blockingKeepAlives{fakeHandler: newFake(), got: make(chan *KeepAlive, 4), release: make(chan struct{})}
	acks := make(chan *KeepAliveAck, 4)
	c, _ := dial(t, h, "alice", Limits{}, ClientOptions{OnKeepAliveAck: func(a *KeepAliveAck) { acks <- a }})
	send := func(ka *KeepAlive) {
		t.Helper()
		if err := c.KeepAlive(ka); err != nil {
			t.Fatal(err)
		}
	}
	send(&KeepAlive{Seq: 1, SessionIDs: []int64{1}})
	if ka := <-h.got; ka.Seq != 1 {
		t.Fatalf("first keep-alive: %+v", ka)
	}
	send(&KeepAlive{Seq: 2, SessionIDs: []int64{1, 2, 3}}) // a regular one: all sessions
	send(&KeepAlive{Seq: 3, SessionIDs: []int64{4}})       // a new session's
	// The reader takes frames in order: once this read is answered, both
	// keep-alives above have been offered.
	if _, err := c.Read(context.Background(), &Read{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	h.release <- struct{}{}
	ka := <-h.got
	got := slices.Sorted(slices.Values(ka.SessionIDs))
	if ka.Seq != 3 || !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("queued keep-alives became %+v (sorted IDs %v), want Seq 3 listing 1-4", ka, got)
	}
	h.release <- struct{}{}
	for _, want := range []uint64{1, 3} {
		if a := <-acks; a.Seq != want {
			t.Fatalf("ack %+v, want Seq %d", a, want)
		}
	}
}

func TestMergeKeepAlivesBounded(t *testing.T) {
	ka := &KeepAlive{Seq: 9, SessionIDs: []int64{1, 2}}
	if got := mergeKeepAlives(ka, &KeepAlive{Seq: 8, SessionIDs: []int64{2, 3}}, 4); !slices.Equal(got.SessionIDs, []int64{1, 2, 3}) || got.Seq != 9 {
		t.Fatalf("merge: %+v", got)
	}
	if got := mergeKeepAlives(ka, &KeepAlive{Seq: 8, SessionIDs: []int64{3, 4, 5}}, 4); got != ka {
		t.Fatalf("merge past the limit: %+v, want the newer alone", got)
	}
}

// connToOldMember returns a client connection to a member that speaks
// protocol version only: it welcomes the client and reads nothing after,
// so a test can check what the client refuses to send it. Closed when
// the test ends.
func connToOldMember(t *testing.T, version uint8) *ClientConn {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() {
		defer b.Close()
		if _, err := newFrameReader(b).read(handshakeMaxFrame); err != nil {
			done <- err
			return
		}
		w, _ := AppendFrame(nil, handshakeVersion, 0, &Welcome{Version: version, Member: "old",
			ElectionTimeout: time.Second, MinSessionTTL: 4 * time.Second,
			MaxFrame: DefaultMaxFrame, MaxInFlight: 4, MaxWatchers: 4}, handshakeMaxFrame)
		_, err := b.Write(w)
		done <- err
		_, _ = io.Copy(io.Discard, b)
	}()
	c, err := Handshake(context.Background(), a, ClientOptions{})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close() })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return c
}
