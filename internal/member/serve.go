package member

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coordcell/coord/internal/clientwire"
	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
	"github.com/coordcell/coord/transport"
)

// allowsWrite reports whether the grant covers a write of key (or of
// every key under it, for a prefix delete).
func (g *Grant) allowsWrite(key string) bool {
	for _, p := range g.WritePrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// clientServer is a member's side of its clients: the listeners it
// serves and every client connection, all ended at Close.
type clientServer struct {
	n      *Node
	auth   *clientAuth     // who a TLS client is (client_auth.go)
	ctx    context.Context // ends at Close: every connection's Serve returns
	cancel context.CancelFunc
	wg     sync.WaitGroup
	warn   sync.Once // the one plaintext warning

	// budget bounds the bytes queued for all clients together.
	budget *clientwire.Budget
	counts doorCounters
	// bgOnce starts the guard and the announcer (client_serve_guard.go)
	// with the first listener; announceNow pokes the announcer.
	bgOnce      sync.Once
	announceNow chan struct{}

	mu          sync.Mutex
	closed      bool
	lns         map[net.Listener]struct{}
	pending     pendingTable   // connections in their handshake
	admitted    int            // connections welcomed
	perIdentity map[string]int // connections welcomed, by identity
	live        map[*servedConn]struct{}
}

func newClientServer(n *Node) *clientServer {
	cs := &clientServer{n: n, lns: make(map[net.Listener]struct{}), perIdentity: make(map[string]int),
		live:        make(map[*servedConn]struct{}),
		announceNow: make(chan struct{}, 1),
		auth:        newClientAuth(&n.cfg, n.cfg.Logger),
		budget:      clientwire.NewBudget(max(n.cfg.ClientQueueBytesTotal, 2*int64(n.cfg.MaxFrameSize)))}
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	return cs
}

// ServeClients serves processes that are not members (Connect) on l,
// which the host supplies: a plain listener, or a tls.Listener whose
// config requires and verifies client certificates (mutual TLS). Under
// TLS a client's identity is its certificate's name (the first DNS SAN,
// else the first URI SAN, else the common name), for a certificate the
// listener's config verified or one of a CA the member trusts for
// clients, or the name its credential proves (IssueClientCredential,
// which only a config without chain verification lets through:
// Config.ClientAddr's does); anything else is refused. On a plain
// listener it is the name the client gives, unauthenticated (one WARN is
// logged), so use plaintext only where the network itself admits only
// trusted clients. A client is never a member: it reaches no Raft message,
// membership change or session it did not create, and writes only where
// Config.ClientPolicy grants.
//
// It blocks until l fails (its error is returned) or the member closes
// (then errs.Closed); Close closes l and every client connection served.
func (n *Node) ServeClients(l net.Listener) error {
	cs := n.clients
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		l.Close()
		return errs.Closed
	}
	cs.lns[l] = struct{}{}
	cs.startBackground()
	cs.mu.Unlock()
	n.advertiseClientAddr()
	defer func() {
		cs.mu.Lock()
		delete(cs.lns, l)
		cs.mu.Unlock()
		n.advertiseClientAddr()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			if cs.ctx.Err() != nil {
				return errs.Closed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		// Connections that have not finished their handshake are bounded
		// in total and per address, so a flood of dials can pile up
		// neither goroutines nor silent connections that lock honest
		// clients out (see Config.ClientMaxPending).
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			conn.Close()
			continue
		}
		p, dropped := cs.pending.add(conn, time.Now(), n.cfg.ClientMaxPending, max(n.cfg.ClientMaxPending/4, 1))
		cs.wg.Add(1)
		cs.mu.Unlock()
		if dropped != nil {
			closeNow(dropped.conn) // its goroutine counts it refused
		}
		go func() {
			defer cs.wg.Done()
			cs.serve(conn, p)
		}()
	}
}

// ClientAddr returns the address the member serves clients on
// (Config.ClientAddr, with the port bound), or "" without one.
func (n *Node) ClientAddr() string {
	if n.clientLn == nil {
		return ""
	}
	return n.clientLn.Addr().String()
}

// listenClients opens Config.ClientAddr with clientPortTLS, and serves
// it until Close.
func (n *Node) listenClients() error {
	tc, err := n.clientPortTLS()
	if err != nil {
		return fmt.Errorf("%w: clients: %w", errs.InvalidConfig, err)
	}
	ln, err := net.Listen("tcp", n.cfg.ClientAddr)
	if err != nil {
		return fmt.Errorf("%w: clients: %w", errs.Listen, err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	n.clientLn = ln
	n.clients.wg.Go(func() {
		if err := n.ServeClients(ln); err != nil && !errors.Is(err, errs.Closed) {
			n.cfg.Logger.Error("stopped serving clients", "addr", ln.Addr().String(), "err", err)
		}
	})
	return nil
}

// clientPortTLS is the client port's TLS configuration, nil for
// plaintext. With a client secret (Config.ClientSecret, else the member
// Secret) the port presents a certificate from the client CA, so a
// client can verify the member with the client CA alone, and takes what
// clientAuth.authenticate takes: certificates of the members' CA (Secret
// or TLS, so hosts with a PKI can keep issuing clients theirs) and of the
// client CA, and client credentials. It lists no CAs in its certificate
// request: a credential's certificate is self-signed, and some clients
// send only a certificate from a listed CA. Under TLS alone it trusts
// the TLS configuration's certificates, as crypto/tls checks them.
func (n *Node) clientPortTLS() (*tls.Config, error) {
	secret := n.cfg.ClientSecret
	if secret == nil {
		secret = n.cfg.Secret
	}
	if secret == nil {
		if n.cfg.TLS == nil {
			return nil, nil
		}
		tc := n.cfg.TLS.Clone()
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		return tc, nil
	}
	port, err := transport.ClientSecretTLS(secret, n.cfg.Name)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates:     port.Certificates,
		MinVersion:       tls.VersionTLS13,
		ClientAuth:       tls.RequireAnyClientCert, // checked by VerifyConnection
		VerifyConnection: n.clients.auth.verifyConnection,
	}, nil
}

// close ends every listener and client connection, and waits for them.
func (cs *clientServer) close() {
	cs.cancel() // first, so a listener's Accept failing below means errs.Closed
	cs.mu.Lock()
	cs.closed = true
	for l := range cs.lns {
		l.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// serve authenticates one connection and speaks the protocol on it. p
// is its place among the handshakes in progress, which it leaves once
// admitted (Welcome) or ended.
func (cs *clientServer) serve(conn net.Conn, p *pendingConn) {
	n := cs.n
	h := &clientHandler{cs: cs, n: n, pending: p}
	err := cs.handshake(conn, h)
	if h.credential {
		defer cs.auth.leave(h)
	}
	if err == nil {
		// Its own context, so that the guard can end it while the member
		// cannot serve (client_serve_guard.go).
		ctx, cancel := context.WithCancel(cs.ctx)
		defer cancel()
		h.conn = ctx
		sc := &servedConn{cancel: cancel}
		cs.mu.Lock()
		cs.live[sc] = struct{}{}
		cs.mu.Unlock()
		defer func() {
			cs.mu.Lock()
			delete(cs.live, sc)
			cs.mu.Unlock()
		}()
		err = clientwire.Serve(ctx, conn, h.identity, h, clientwire.Limits{
			MaxFrame:         n.cfg.MaxFrameSize,
			MaxInFlight:      n.cfg.ClientMaxInFlight,
			MaxWatchers:      n.cfg.ClientMaxWatchers,
			QueueBytes:       n.cfg.ClientQueueBytes,
			Budget:           cs.budget,
			HandshakeTimeout: max(time.Until(p.at.Add(n.cfg.ClientHandshakeTimeout)), time.Millisecond),
			IdleTimeout:      n.cfg.ClientIdleTimeout,
			IOTimeout:        n.cfg.ClientIOTimeout,
			ErrorCode:        clientwire.CodeOf,
			Logger:           n.cfg.Logger,
		})
		cancel()
		h.reports.wait()
	}
	closeNow(conn)
	cs.mu.Lock()
	cs.pending.remove(p)
	if h.admitted {
		cs.admitted--
		if cs.perIdentity[h.identity]--; cs.perIdentity[h.identity] <= 0 {
			delete(cs.perIdentity, h.identity)
		}
	}
	cs.mu.Unlock()
	switch {
	case !h.admitted:
		cs.counts.refused.Add(1)
	case errors.Is(err, clientwire.ErrSlowReader):
		cs.counts.cutSlow.Add(1)
	case errors.Is(err, clientwire.ErrIdle):
		cs.counts.cutIdle.Add(1)
	}
	var refused *clientwire.RefusedError
	if err != nil && !errors.As(err, &refused) {
		n.cfg.Logger.Debug("client connection ended", "client", h.identity, "err", err)
	}
}

// certIdentity is the name a verified client certificate gives: its
// first DNS SAN, else its first URI SAN, else its common name.
func certIdentity(leaf *x509.Certificate) string {
	switch {
	case len(leaf.DNSNames) > 0:
		return leaf.DNSNames[0]
	case len(leaf.URIs) > 0:
		return leaf.URIs[0].String()
	}
	return leaf.Subject.CommonName
}

// clientHandler serves one client connection: every check of what the
// client may do is made here, against the identity its transport
// authenticated.
type clientHandler struct {
	cs        *clientServer
	n         *Node
	pending   *pendingConn
	plaintext bool
	// credential is set when the client proved a credential the member
	// tracks for revocation (client_auth.go), until the connection ends.
	credential bool
	// Set by Welcome, before Serve calls any other method.
	identity string
	owner    string
	// bornAt is the member's applied index when the client was
	// welcomed: the birth of its writes through this connection.
	bornAt   uint64
	grant    Grant
	admitted bool
	// conn ends with the connection; reports are its watches' progress
	// reports (serve_watch_reports.go).
	conn    context.Context
	reports connReports
	// maxFrame is the longest frame the client reads (Hello.MaxFrame):
	// a read's answer must fit in one.
	maxFrame int
}

var _ clientwire.Handler = (*clientHandler)(nil)

// Welcome admits the client if the policy and the member's limit allow.
func (h *clientHandler) Welcome(identity string, hello *clientwire.Hello) (*clientwire.Welcome, error) {
	n := h.n
	if h.plaintext {
		identity = hello.Name
	}
	switch {
	case identity == "":
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseForbidden, Message: "no client identity"}
	case len(identity) > spi.MaxClientIdentity || !utf8.ValidString(identity):
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseForbidden,
			Message: fmt.Sprintf("client identity of %d bytes: at most %d of UTF-8", len(identity), spi.MaxClientIdentity)}
	case n.closing.Err() != nil:
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseShutdown, Message: "the member is closing"}
	}
	if ok, why := n.servable(); !ok {
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseNotReady, Message: why}
	}
	grant := Grant{WritePrefixes: []string{""}}
	if p := n.cfg.ClientPolicy; p != nil {
		var err error
		if grant, err = p(identity); err != nil {
			return nil, &clientwire.RefusedError{Reason: clientwire.RefuseForbidden, Message: err.Error()}
		}
	}
	cs := h.cs
	cs.mu.Lock()
	switch {
	case h.pending.gone:
		cs.mu.Unlock()
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseBusy, Message: "the handshake took too long"}
	case cs.admitted >= n.cfg.MaxClients:
		cs.mu.Unlock()
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseBusy,
			Message: fmt.Sprintf("the member serves %d clients, its limit", n.cfg.MaxClients)}
	case cs.perIdentity[identity] >= n.cfg.ClientMaxPerIdentity:
		cs.mu.Unlock()
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseBusy,
			Message: fmt.Sprintf("client %q holds %d connections to this member, its limit", identity, n.cfg.ClientMaxPerIdentity)}
	}
	cs.pending.remove(h.pending)
	cs.admitted++
	cs.perIdentity[identity]++
	cs.mu.Unlock()
	h.admitted = true
	h.identity, h.owner, h.grant = identity, spi.ClientOwnerPrefix+identity, grant
	h.bornAt = n.raft.AppliedIndex()
	h.maxFrame = int(hello.MaxFrame)
	return &clientwire.Welcome{
		Member:          n.cfg.Name,
		CellID:          n.raft.CellID(),
		ElectionTimeout: n.electionTimeout(),
		MinSessionTTL:   n.minSessionTTL(),
	}, nil
}

// Propose checks what the client may write and which sessions it acts
// for, then proposes c as the member's own requests are proposed.
func (h *clientHandler) Propose(ctx context.Context, _ string, c *command.Command) (*command.Result, error) {
	n := h.n
	switch c.Kind {
	case command.KindSessionCreate:
		if err := n.checkSessionTTL(time.Duration(c.Session.TTL)); err != nil {
			return nil, err
		}
		// The state machine holds the creation to the bound it carries,
		// over the cell's count; the look here only spares the log an
		// entry that is sure to be refused.
		c.Session.Owner, c.Session.MaxSessions = h.owner, int64(n.cfg.ClientMaxSessions)
		if held := n.sm.OwnerSessions(h.owner); held >= c.Session.MaxSessions {
			n.sessionStats.RefusedLimit.Add(1)
			return nil, fmt.Errorf("%w: client %q holds %d sessions, the limit", errs.TooManySessions, h.identity, held)
		}
	case command.KindTxn:
		if err := n.inputLimits().CheckTxn(c.Txn); err != nil {
			return nil, err
		}
		for op := range c.Txn.AllOps() { // nested transactions' ops too
			if op.Type != command.OpGet && !h.grant.allowsWrite(op.Key) {
				return nil, fmt.Errorf("%w: client %q may not write %q", errs.Forbidden, h.identity, op.Key)
			}
		}
		if err := h.checkQueueEntries(c.Txn); err != nil {
			return nil, err
		}
		h.markActor(c.Txn)
	}
	if p := c.Proposer; p != nil {
		// The client's own name for its write (outcome.go): its owner is
		// the client's identity, whatever it said, so it can neither pass
		// for another's proposer nor suppress another's writes.
		if len(p.Key) > spi.MaxIdempotencyKey {
			return nil, fmt.Errorf("%w: idempotency key of %d bytes (at most %d)", errs.InvalidArgument, len(p.Key), spi.MaxIdempotencyKey)
		}
		p.Owner = h.owner
		if p.Born == 0 {
			// A client knows no log index: the applied index when its
			// connection was admitted is one every call on it began after.
			p.Born = h.bornAt
		}
	}
	_, foreign, gone, err := h.sortSessions(ctx, clientwire.SessionsNamed(c))
	switch {
	case err != nil:
		return nil, err
	case len(foreign) > 0:
		return nil, fmt.Errorf("%w: session %d is not this client's", errs.Forbidden, foreign[0])
	case len(gone) > 0 && c.Kind == command.KindSessionEnd:
		// Already ended: what ending it on a member answers.
		return &command.Result{Rev: n.sm.Revision()}, nil
	case len(gone) > 0:
		return nil, fmt.Errorf("%w: session %d", errs.SessionExpired, gone[0])
	}
	res, err := n.proposeWithin(ctx, c, h.maxRead(c))
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// Reply overheads: what a read's answer holds besides its keys (counted
// with command.ReadCostOverhead each, which covers their encoding): the
// frame header, counts and revision; for a transaction, each operation's
// result header too.
const (
	readReplyOverhead = 64
	opReplyOverhead   = 32
)

// maxRead bounds the reads of c for this client: Config.MaxReadBytes, or
// less when the client's frames hold less, so what would not reach it is
// refused (errs.ReadTooLarge) before it is read, and a transaction that
// writes is refused before it changes anything rather than applied with
// an answer the client never gets.
func (h *clientHandler) maxRead(c *command.Command) int64 {
	ops := 0
	if c.Txn != nil {
		ops = max(len(c.Txn.Then), len(c.Txn.Else))
		if c.Txn.Nests() {
			ops = c.Txn.Size() // a result for every op that may run
		}
	}
	fit := int64(h.maxFrame) - readReplyOverhead - int64(ops)*opReplyOverhead
	return max(min(h.n.maxReadBytes(), fit), 1)
}

// sortSessions sorts ids into the client's live sessions (with their
// TTLs), other owners' (foreign) and ended ones. A session this member
// does not know may be one it has not applied yet (the client created it
// through another member): it waits for a read barrier, so its state
// holds every session created before the request, and what it still
// does not know has ended. Session IDs are log indexes, never reused, so
// none can appear later.
func (h *clientHandler) sortSessions(ctx context.Context, ids []int64) (owned map[int64]time.Duration, foreign, gone []int64, err error) {
	owned = make(map[int64]time.Duration)
	look := func(ids []int64) ([]int64, error) {
		var missing []int64
		for _, id := range ids {
			si, ok, err := h.n.sm.Session(id)
			if err != nil {
				return nil, h.n.stateErr(err)
			}
			switch {
			case !ok:
				missing = append(missing, id)
			case si.Owner != h.owner:
				foreign = append(foreign, id)
			default:
				owned[id] = time.Duration(si.TTL)
			}
		}
		return missing, nil
	}
	unknown, err := look(ids)
	if err != nil || len(unknown) == 0 {
		return owned, foreign, nil, err
	}
	if err := h.n.raft.ReadBarrier(ctx); err != nil {
		return nil, nil, nil, err
	}
	gone, err = look(unknown)
	return owned, foreign, gone, err
}

// Read reads by read index, or from this member's state: a key, or a
// page of a prefix bounded by maxRead.
func (h *clientHandler) Read(ctx context.Context, _ string, r *clientwire.Read) (*clientwire.ReadResult, error) {
	n := h.n
	o := spi.ReadOptions{Serializable: r.Serializable, Limit: int(r.Limit), After: r.After}
	if r.Ranged {
		return h.readRange(ctx, r, o)
	}
	if r.Prefix {
		if err := n.inputLimits().CheckList(r.Key, o); err != nil {
			return nil, err
		}
		kvs, rev, err := n.listPage(ctx, r.Key, o, h.maxRead(&command.Command{}))
		if err != nil {
			return nil, err
		}
		return &clientwire.ReadResult{KVs: kvs, Rev: rev}, nil
	}
	if err := n.inputLimits().CheckKey(r.Key); err != nil {
		return nil, err
	}
	if o.Paged() {
		return nil, fmt.Errorf("%w: Limit and After page a prefix read", errs.InvalidArgument)
	}
	if err := n.readBarrier(ctx, o); err != nil {
		return nil, err
	}
	// Read before the key, so the key's state is at least as new as Rev.
	rev := n.sm.Revision()
	kv, ok, err := n.sm.Get(r.Key)
	if err != nil {
		return nil, n.stateErr(err)
	}
	out := &clientwire.ReadResult{Rev: max(rev, kv.ModRev)}
	if ok {
		out.KVs = []command.KV{kv}
	}
	return out, nil
}

// readRange serves a ranged read (clientwire's version 5): a key alone
// (not Prefix, no End), a prefix, or [Key, End), checked as the root
// checks a Get or a List. A revision older than the history is answered
// in the result (CompactRev), so the client can say which is the oldest.
func (h *clientHandler) readRange(ctx context.Context, r *clientwire.Read, o spi.ReadOptions) (*clientwire.ReadResult, error) {
	n := h.n
	ro := r.Range
	o.Rev, o.End, o.KeysOnly, o.CountOnly = ro.Rev, ro.End, ro.KeysOnly, ro.CountOnly
	o.SortTarget, o.SortDescend = ro.SortTarget, ro.SortDescend
	o.MinModRev, o.MaxModRev, o.MinCreateRev, o.MaxCreateRev = ro.MinModRev, ro.MaxModRev, ro.MinCreateRev, ro.MaxCreateRev
	var count int64
	if ro.Count {
		o.Counted = &count
	}
	var err error
	switch {
	case r.Prefix && o.End != "":
		err = fmt.Errorf("%w: a ranged read of a prefix with an end", errs.InvalidArgument)
	case r.Prefix || o.End != "":
		err = n.inputLimits().CheckList(r.Key, o)
	default:
		if err = n.inputLimits().CheckKey(r.Key); err == nil {
			err = spi.CheckGet(r.Key, o)
		}
		o.End = r.Key + "\x00" // the key alone
	}
	if err != nil {
		return nil, err
	}
	kvs, rev, err := n.rangeRead(ctx, r.Key, o, h.maxRead(&command.Command{}))
	var ce *spi.CompactedError
	if errors.As(err, &ce) {
		return &clientwire.ReadResult{Ranged: true, Rev: n.sm.Revision(), CompactRev: ce.Oldest}, nil
	}
	if err != nil {
		return nil, err
	}
	return &clientwire.ReadResult{Ranged: true, KVs: kvs, Rev: rev, Count: count}, nil
}

// KeepAlive checks that every session is the client's, then folds them
// into this member's next batched keep-alive and answers once the leader
// has acked it (client_serve_keepalive.go).
func (h *clientHandler) KeepAlive(ctx context.Context, _ string, ka *clientwire.KeepAlive) (*clientwire.KeepAliveAck, error) {
	ack := &clientwire.KeepAliveAck{Seq: ka.Seq}
	// Sorted in place, not hashed: ka is this call's own, and nothing is
	// sized by the count a client sent (at most MaxKeepAliveIDs).
	ids := ka.SessionIDs
	slices.Sort(ids)
	ids = slices.Compact(ids)
	owned, foreign, gone, err := h.sortSessions(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, id := range foreign {
		ack.Gone = append(ack.Gone, clientwire.Gone{ID: id, Code: clientwire.CodeForbidden})
	}
	for _, id := range gone {
		ack.Gone = append(ack.Gone, clientwire.Gone{ID: id, Code: clientwire.CodeSessionExpired})
	}
	if len(owned) == 0 {
		return ack, nil
	}
	if err := h.n.sessions.keepClientsAlive(ctx, owned, ack); err != nil {
		return nil, err
	}
	return ack, nil
}

var _ clientwire.MembersHandler = (*clientHandler)(nil)

// Members answers a client's question for the cell's client addresses:
// those this member serves clients on itself (Config.ClientAddr and
// every ServeClients listener, less wildcard binds no client elsewhere
// could dial), then the one every member of the Raft configuration
// announced (the address book, as this member applied it), then those
// live members gossip. Another member's address is its own word, so it
// comes only from that member: its announcement through Raft, or its
// gossip metadata (heard over the cell's gossip keys). Either is a hint
// the client only adds to its configured members, earning no trust past
// the TLS handshake.
func (h *clientHandler) Members(context.Context, string) (*clientwire.MembersResult, error) {
	addrs := h.cs.ownAddrs()
	add := func(a string) {
		if len(addrs) < clientwire.MaxMemberAddrs && clientwire.CheckMemberAddr(a) == nil && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if ms, err := h.n.members(); err == nil {
		for _, m := range ms {
			if m.ClientAddr != "" {
				add(m.ClientAddr)
			}
		}
	}
	for _, a := range h.n.gossipClientAddrs() {
		add(a)
	}
	return &clientwire.MembersResult{Addrs: addrs}, nil
}

// ownAddrs lists the dialable addresses of the listeners this member
// serves clients on, at most clientwire.MaxMemberAddrs.
func (cs *clientServer) ownAddrs() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []string
	for l := range cs.lns {
		a := l.Addr().String()
		if host, _, err := net.SplitHostPort(a); err == nil {
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				continue
			}
		}
		if clientwire.CheckMemberAddr(a) == nil && !slices.Contains(out, a) && len(out) < clientwire.MaxMemberAddrs {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}
