package coord

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
	"github.com/coordcell/coord/transport"
)

// ClientGrant is what a member lets one client do (Config.ClientPolicy).
type ClientGrant struct {
	// WritePrefixes are the key prefixes the client may write under: a
	// put, a delete or a prefix delete of a key (or prefix) that starts
	// with one of them. The recipes write under their own prefixes (a
	// Mutex "locks/x" writes under "locks/x", an Election under its
	// name), which the grant covers like any other key. "" grants every
	// key; nil or empty grants none (the client may still read, watch and
	// keep sessions). Reads are not restricted.
	WritePrefixes []string
}

// allowsWrite reports whether the grant covers a write of key (or of
// every key under it, for a prefix delete).
func (g *ClientGrant) allowsWrite(key string) bool {
	for _, p := range g.WritePrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Defaults of the client limits (Config.MaxClients, ClientMaxInFlight,
// ClientMaxWatchers).
const (
	DefaultMaxClients        = 1024
	DefaultClientMaxInFlight = 64
	DefaultClientMaxWatchers = 256
)

// maxClientIdentity bounds a client's identity in bytes: it is stored
// with each session the client creates.
const maxClientIdentity = 256

// clientOwnerPrefix makes a client's owner name: a client can never
// pass for a member's own sessions, whose owner is "".
const clientOwnerPrefix = "client:"

// clientServer is a member's side of its clients: the listeners it
// serves and every client connection, all ended at Close.
type clientServer struct {
	n      *Node
	ctx    context.Context // ends at Close: every connection's Serve returns
	cancel context.CancelFunc
	wg     sync.WaitGroup
	warn   sync.Once // the one plaintext warning

	// bgOnce starts the guard and the announcer (client_serve_guard.go)
	// with the first listener; announceNow pokes the announcer.
	bgOnce      sync.Once
	announceNow chan struct{}

	mu       sync.Mutex
	closed   bool
	lns      map[net.Listener]struct{}
	conns    int // connections being served (handshaking or admitted)
	admitted int // connections welcomed
	live     map[*servedConn]struct{}
}

func newClientServer(n *Node) *clientServer {
	cs := &clientServer{n: n, lns: make(map[net.Listener]struct{}), live: make(map[*servedConn]struct{}),
		announceNow: make(chan struct{}, 1)}
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	return cs
}

// ServeClients serves processes that are not members (Connect) on l,
// which the host supplies: a plain listener, or a tls.Listener whose
// config requires and verifies client certificates (mutual TLS). Under
// TLS a client's identity is its certificate's name (the first DNS SAN,
// else the first URI SAN, else the common name); on a plain listener it
// is the name the client gives, unauthenticated (one WARN is logged), so
// use plaintext only where the network itself admits only trusted
// clients. A client is never a member: it reaches no Raft message,
// membership change or session it did not create, and writes only where
// Config.ClientPolicy grants.
//
// It blocks until l fails (its error is returned) or the member closes
// (then ErrClosed); Close closes l and every client connection served.
func (n *Node) ServeClients(l net.Listener) error {
	cs := n.clients
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		l.Close()
		return ErrClosed
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
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		cs.mu.Lock()
		// Connections that have not finished their handshake are bounded
		// too, so a flood of dials cannot pile up goroutines.
		if cs.closed || cs.conns >= 2*n.cfg.MaxClients {
			cs.mu.Unlock()
			conn.Close()
			continue
		}
		cs.conns++
		cs.wg.Add(1)
		cs.mu.Unlock()
		go func() {
			defer cs.wg.Done()
			cs.serve(conn)
			cs.mu.Lock()
			cs.conns--
			cs.mu.Unlock()
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
		return fmt.Errorf("%w: clients: %w", ErrInvalidConfig, err)
	}
	ln, err := net.Listen("tcp", n.cfg.ClientAddr)
	if err != nil {
		return fmt.Errorf("%w: clients: %w", ErrListen, err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	n.clientLn = ln
	n.clients.wg.Go(func() {
		if err := n.ServeClients(ln); err != nil && !errors.Is(err, ErrClosed) {
			n.cfg.Logger.Error("stopped serving clients", "addr", ln.Addr().String(), "err", err)
		}
	})
	return nil
}

// clientPortTLS is the client port's TLS configuration, nil for
// plaintext. The client secret (Config.ClientSecret, else the member
// Secret) gives the certificate the port presents, from the client CA,
// so a client holding only that secret can verify the member; the port
// trusts client certificates from that CA and from the members' own
// (Secret or TLS), so hosts with a PKI can keep issuing clients theirs.
func (n *Node) clientPortTLS() (*tls.Config, error) {
	secret := n.cfg.ClientSecret
	if secret == nil {
		secret = n.cfg.Secret
	}
	var member *tls.Config // the members' trust, for client certificates
	switch {
	case n.cfg.Secret != nil:
		t, err := transport.SecretTLS(n.cfg.Secret, n.cfg.Name)
		if err != nil {
			return nil, err
		}
		member = t
	case n.cfg.TLS != nil:
		member = n.cfg.TLS
	}
	if secret == nil {
		if member == nil {
			return nil, nil
		}
		tc := member.Clone()
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		return tc, nil
	}
	tc, err := transport.ClientSecretTLS(secret, n.cfg.Name)
	if err != nil {
		return nil, err
	}
	ca, err := transport.ClientSecretCA(secret)
	if err != nil {
		return nil, err
	}
	trust := func(m *tls.Config) *x509.CertPool {
		if m == nil || m.ClientCAs == nil {
			return tc.ClientCAs
		}
		pool := m.ClientCAs.Clone()
		pool.AddCert(ca)
		return pool
	}
	tc.ClientCAs = trust(member)
	if member != nil && member.GetConfigForClient != nil {
		// A reloading TLS (TLSFiles) serves its current CA this way: trust
		// that one, not the CA as of Open.
		base := tc.Clone()
		tc.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cur, err := member.GetConfigForClient(hello)
			if err != nil || cur == nil {
				return nil, err
			}
			c := base.Clone()
			c.ClientCAs = trust(cur)
			return c, nil
		}
	}
	return tc, nil
}

// close ends every listener and client connection, and waits for them.
func (cs *clientServer) close() {
	cs.cancel() // first, so a listener's Accept failing below means ErrClosed
	cs.mu.Lock()
	cs.closed = true
	for l := range cs.lns {
		l.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// serve authenticates one connection and speaks the protocol on it.
func (cs *clientServer) serve(conn net.Conn) {
	n := cs.n
	h := &clientHandler{cs: cs, n: n}
	if tc, ok := conn.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(cs.ctx, 10*time.Second)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			conn.Close()
			return
		}
		st := tc.ConnectionState()
		if len(st.PeerCertificates) == 0 {
			n.cfg.Logger.Warn("refused a client without a certificate", "remote", conn.RemoteAddr().String())
			conn.Close()
			return
		}
		h.identity = certIdentity(st.PeerCertificates[0])
	} else {
		h.plaintext = true
		cs.warn.Do(func() {
			n.cfg.Logger.Warn("serving clients in plaintext: a client's identity is the name it gives, unauthenticated")
		})
	}
	// Its own context, so that the guard can end it while the member
	// cannot serve.
	ctx, cancel := context.WithCancel(cs.ctx)
	defer cancel()
	sc := &servedConn{cancel: cancel}
	cs.mu.Lock()
	cs.live[sc] = struct{}{}
	cs.mu.Unlock()
	defer func() {
		cs.mu.Lock()
		delete(cs.live, sc)
		cs.mu.Unlock()
	}()
	err := clientwire.Serve(ctx, conn, h.identity, h, clientwire.Limits{
		MaxFrame:    n.cfg.MaxFrameSize,
		MaxInFlight: n.cfg.ClientMaxInFlight,
		MaxWatchers: n.cfg.ClientMaxWatchers,
		ErrorCode:   codeFromErr,
		Logger:      n.cfg.Logger,
	})
	if h.admitted {
		cs.mu.Lock()
		cs.admitted--
		cs.mu.Unlock()
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
	plaintext bool
	// Set by Welcome, before Serve calls any other method.
	identity string
	owner    string
	grant    ClientGrant
	admitted bool
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
	case len(identity) > maxClientIdentity || !utf8.ValidString(identity):
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseForbidden,
			Message: fmt.Sprintf("client identity of %d bytes: at most %d of UTF-8", len(identity), maxClientIdentity)}
	case n.closing.Err() != nil:
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseShutdown, Message: "the member is closing"}
	}
	if ok, why := n.servable(); !ok {
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseNotReady, Message: why}
	}
	grant := ClientGrant{WritePrefixes: []string{""}}
	if p := n.cfg.ClientPolicy; p != nil {
		var err error
		if grant, err = p(identity); err != nil {
			return nil, &clientwire.RefusedError{Reason: clientwire.RefuseForbidden, Message: err.Error()}
		}
	}
	h.cs.mu.Lock()
	if h.cs.admitted >= n.cfg.MaxClients {
		h.cs.mu.Unlock()
		return nil, &clientwire.RefusedError{Reason: clientwire.RefuseBusy,
			Message: fmt.Sprintf("the member serves %d clients, its limit", n.cfg.MaxClients)}
	}
	h.cs.admitted++
	h.cs.mu.Unlock()
	h.admitted = true
	h.identity, h.owner, h.grant = identity, clientOwnerPrefix+identity, grant
	return &clientwire.Welcome{
		Member:          n.cfg.Name,
		CellID:          n.raft.CellID(),
		ElectionTimeout: n.electionTimeout(),
		MinSessionTTL:   n.MinSessionTTL(),
	}, nil
}

// Propose checks what the client may write and which sessions it acts
// for, then proposes c as the member's own requests are proposed.
func (h *clientHandler) Propose(ctx context.Context, _ string, c *command.Command) (*command.Result, error) {
	n := h.n
	switch c.Kind {
	case command.KindSessionCreate:
		if ttl := time.Duration(c.Session.TTL); ttl < n.MinSessionTTL() {
			return nil, fmt.Errorf("%w: %v, minimum %v", ErrInvalidTTL, ttl, n.MinSessionTTL())
		}
		c.Session.Owner = h.owner
	case command.KindTxn:
		if err := n.limits().checkTxn(c.Txn); err != nil {
			return nil, err
		}
		for _, ops := range [][]command.Op{c.Txn.Then, c.Txn.Else} {
			for _, op := range ops {
				if op.Type != command.OpGet && !h.grant.allowsWrite(op.Key) {
					return nil, fmt.Errorf("%w: client %q may not write %q", ErrForbidden, h.identity, op.Key)
				}
			}
		}
	}
	_, foreign, gone, err := h.sortSessions(ctx, clientwire.SessionsNamed(c))
	switch {
	case err != nil:
		return nil, err
	case len(foreign) > 0:
		return nil, fmt.Errorf("%w: session %d is not this client's", ErrForbidden, foreign[0])
	case len(gone) > 0 && c.Kind == command.KindSessionEnd:
		// Already ended: what ending it on a member answers.
		return &command.Result{Rev: n.sm.Revision()}, nil
	case len(gone) > 0:
		return nil, fmt.Errorf("%w: session %d", ErrSessionExpired, gone[0])
	}
	res, err := n.propose(ctx, c)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// sortSessions sorts ids into the client's live sessions (with their
// TTLs), other owners' (foreign) and ended ones. A session this member
// does not know may be one it has not applied yet (the client created it
// through another member): it waits for a read barrier, so its state
// holds every session created before the request, and what it still
// does not know has ended. Session IDs are log indexes, never reused, so
// none can appear later.
func (h *clientHandler) sortSessions(ctx context.Context, ids []int64) (owned map[SessionID]time.Duration, foreign, gone []int64, err error) {
	owned = make(map[SessionID]time.Duration, len(ids))
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
				owned[SessionID(id)] = time.Duration(si.TTL)
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

// Read reads by read index, or from this member's state.
func (h *clientHandler) Read(ctx context.Context, _ string, r *clientwire.Read) (*clientwire.ReadResult, error) {
	n := h.n
	o := readOptions{serializable: r.Serializable}
	if r.Prefix {
		if err := n.limits().checkPrefix(r.Key); err != nil {
			return nil, err
		}
		if err := n.readBarrier(ctx, o); err != nil {
			return nil, err
		}
		kvs, rev, err := n.sm.List(r.Key)
		if err != nil {
			return nil, n.stateErr(err)
		}
		return &clientwire.ReadResult{KVs: kvs, Rev: rev}, nil
	}
	if err := n.limits().checkKey(r.Key); err != nil {
		return nil, err
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

// KeepAlive checks that every session is the client's, then folds them
// into this member's next batched keep-alive and answers once the leader
// has acked it (client_serve_keepalive.go).
func (h *clientHandler) KeepAlive(ctx context.Context, _ string, ka *clientwire.KeepAlive) (*clientwire.KeepAliveAck, error) {
	ack := &clientwire.KeepAliveAck{Seq: ka.Seq}
	ids := make([]int64, 0, len(ka.SessionIDs))
	seen := make(map[int64]bool, len(ka.SessionIDs))
	for _, id := range ka.SessionIDs {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
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
