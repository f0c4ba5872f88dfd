package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/coordcell/coord/internal/command"
	"github.com/coordcell/coord/internal/errs"
	"github.com/coordcell/coord/internal/spi"
)

// The admin API, under /admin/ (see WithAdmin). Keys travel in the query
// string (?key=, ?prefix=), not the path, so that no key is altered by
// path cleaning. Answers are JSON; errors are {"error": "..."} with a
// status code that says what kind (404 absent, 409 conflict, 400 bad
// input, 503 unavailable).
func (n *Node) adminMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, n.statusReport(r.Context()))
	})
	mux.HandleFunc("GET /admin/members", func(w http.ResponseWriter, r *http.Request) {
		if _, err := n.Members(r.Context()); err != nil {
			adminError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, n.statusReport(r.Context()).Members)
	})
	mux.HandleFunc("POST /admin/members/{op}", n.adminMembers)
	mux.HandleFunc("GET /admin/kv", func(w http.ResponseWriter, r *http.Request) {
		kv, err := spi.Get(r.Context(), n.Backend(), r.URL.Query().Get("key"), spi.ReadOptions{})
		reply(w, kv, err)
	})
	mux.HandleFunc("PUT /admin/kv", func(w http.ResponseWriter, r *http.Request) {
		val, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(n.cfg.MaxValueSize)+1))
		if err != nil {
			adminError(w, errors.Join(errs.InvalidArgument, err))
			return
		}
		key := r.URL.Query().Get("key")
		res, err := spi.Commit(r.Context(), n.Backend(), &command.Txn{Then: []command.Op{{Type: command.OpPut, Key: key, Value: val}}}, nil)
		var kv command.KV
		if err == nil {
			kv = res.Ops[0].KVs[0]
		}
		reply(w, kv, err)
	})
	mux.HandleFunc("DELETE /admin/kv", func(w http.ResponseWriter, r *http.Request) {
		res, err := spi.Commit(r.Context(), n.Backend(),
			&command.Txn{Then: []command.Op{{Type: command.OpDelete, Key: r.URL.Query().Get("key")}}}, nil)
		reply(w, map[string]int64{"revision": res.Rev}, err)
	})
	mux.HandleFunc("GET /admin/list", func(w http.ResponseWriter, r *http.Request) {
		kvs, rev, err := spi.List(r.Context(), n.Backend(), r.URL.Query().Get("prefix"), spi.ReadOptions{})
		reply(w, ListReport{KVs: kvs, Revision: rev}, err)
	})
	for path, pick := range map[string]func(inspection) any{
		"GET /admin/sessions":  func(in inspection) any { return in.Sessions },
		"GET /admin/locks":     func(in inspection) any { return in.Locks },
		"GET /admin/elections": func(in inspection) any { return in.Elections },
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			in := n.inspect(r.Context(), spi.ReadOptions{})
			if in.Err != "" {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": in.Err})
				return
			}
			writeJSON(w, http.StatusOK, pick(in))
		})
	}
	mux.HandleFunc("DELETE /admin/sessions/{id}", n.adminRevoke)
	mux.HandleFunc("POST /admin/txn", n.adminTxn)
	mux.HandleFunc("GET /admin/watch", n.adminWatch)
	mux.HandleFunc("GET /admin/backup", func(w http.ResponseWriter, r *http.Request) {
		// Headers go out with the first byte of the backup, so an error
		// found before it is still reported as one; after it, the
		// checksum the client verifies is what catches a cut stream.
		w.Header().Set("Content-Type", "application/octet-stream")
		lw := &lazyWriter{w: w}
		if err := n.Backup(r.Context(), lw); err != nil && !lw.started {
			adminError(w, err)
		}
	})
	return mux
}

// ListReport is the admin API's answer to a list.
type ListReport struct {
	KVs      []command.KV `json:"kvs"`
	Revision int64        `json:"revision"`
}

// MemberRequest is the body of the admin API's membership changes.
type MemberRequest struct {
	Name string `json:"name"`
	Addr string `json:"addr,omitempty"` // for add-learner
}

func (n *Node) adminMembers(w http.ResponseWriter, r *http.Request) {
	var req MemberRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		adminError(w, errors.Join(errs.InvalidArgument, err))
		return
	}
	var change func(context.Context) error
	switch r.PathValue("op") {
	case "add-learner":
		change = func(ctx context.Context) error { return n.AddLearner(ctx, req.Name, req.Addr) }
	case "promote":
		change = func(ctx context.Context) error { return n.Promote(ctx, req.Name) }
	case "remove":
		change = func(ctx context.Context) error { return n.RemoveMember(ctx, req.Name) }
	default:
		http.NotFound(w, r)
		return
	}
	reply(w, map[string]string{"member": req.Name}, change(r.Context()))
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		adminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// adminError maps the package's errors to HTTP statuses, so that a
// client can tell "absent" and "conflict" from "try again".
func adminError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, errs.NotFound), errors.Is(err, errs.UnknownMember):
		code = http.StatusNotFound
	case errors.Is(err, errs.Conflict), errors.Is(err, errs.MemberExists):
		code = http.StatusConflict
	case errors.Is(err, errs.InvalidArgument), errors.Is(err, errs.InvalidKey),
		errors.Is(err, errs.KeyTooLarge), errors.Is(err, errs.ValueTooLarge),
		errors.Is(err, errs.InvalidConfig):
		code = http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		code = 499 // the client went away; nobody reads this
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// lazyWriter writes nothing, headers included, until there is a byte to
// write, so that a handler can still choose its status before that.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started && len(p) > 0 {
		l.started = true
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

// adminRevoke ends a session as its expiry would: its ephemeral keys
// (lock waits and holds, candidacies) go in one change. The process that
// held it sees its session end.
func (n *Node) adminRevoke(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		adminError(w, fmt.Errorf("%w: session ID %q is not a positive number", errs.InvalidArgument, r.PathValue("id")))
		return
	}
	res, err := n.propose(r.Context(), &command.Command{Kind: command.KindSessionEnd,
		Session: &command.Session{ID: id}})
	if err == nil && res.SessionID == 0 {
		err = fmt.Errorf("%w: session %d is not alive", errs.NotFound, id)
	}
	reply(w, map[string]int64{"session": id, "revision": res.Rev}, err)
}

// TxnRequest is a transaction as the admin API takes it (coordctl txn
// reads one from a JSON file): every comparison of If holds, or Then runs
// instead of Else.
//
//	{"if":   [{"key": "cfg", "target": "version", "op": "=", "int": 3}],
//	 "then": [{"op": "put", "key": "cfg", "value": "v4"}],
//	 "else": [{"op": "get", "key": "cfg"}]}
type TxnRequest struct {
	If   []TxnCompare `json:"if"`
	Then []TxnOp      `json:"then"`
	Else []TxnOp      `json:"else"`
}

// TxnCompare is one comparison: Target is "version", "create_rev",
// "mod_rev" (compared with Int) or "value" (compared with Value); Op is
// "=", "!=", "<" or ">".
type TxnCompare struct {
	Key    string `json:"key"`
	Target string `json:"target"`
	Op     string `json:"op"`
	Int    int64  `json:"int,omitempty"`
	Value  string `json:"value,omitempty"`
}

// TxnOp is one operation: Op is "put" (Key, Value), "get", "delete",
// "get_prefix" or "delete_prefix" (Key is then the prefix).
type TxnOp struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// build turns the request into a transaction; bad names are
// ErrInvalidArgument, and the transaction's own validation (sizes,
// counts) runs at commit.
func (req TxnRequest) build() (*command.Txn, error) {
	t := &command.Txn{}
	for i, c := range req.If {
		cmp, err := c.cmp()
		if err != nil {
			return nil, fmt.Errorf("%w: if[%d]: %w", errs.InvalidArgument, i, err)
		}
		t.If = append(t.If, cmp)
	}
	for name, ops := range map[string][]TxnOp{"then": req.Then, "else": req.Else} {
		built := make([]command.Op, 0, len(ops))
		for i, o := range ops {
			op, err := o.op()
			if err != nil {
				return nil, fmt.Errorf("%w: %s[%d]: %w", errs.InvalidArgument, name, i, err)
			}
			built = append(built, op)
		}
		if name == "then" {
			t.Then = built
		} else {
			t.Else = built
		}
	}
	return t, nil
}

func (c TxnCompare) cmp() (command.Compare, error) {
	out := command.Compare{Key: c.Key}
	switch c.Target {
	case "version":
		out.Target = command.TargetVersion
	case "create_rev":
		out.Target = command.TargetCreateRev
	case "mod_rev":
		out.Target = command.TargetModRev
	case "value":
		out.Target, out.Value = command.TargetValue, []byte(c.Value)
	default:
		return out, fmt.Errorf("unknown target %q (version, create_rev, mod_rev or value)", c.Target)
	}
	if out.Target != command.TargetValue {
		out.Int = c.Int
	}
	switch c.Op {
	case "=":
		out.Op = command.Equal
	case "!=":
		out.Op = command.NotEqual
	case "<":
		out.Op = command.Less
	case ">":
		out.Op = command.Greater
	default:
		return out, fmt.Errorf("unknown comparison %q (=, !=, < or >)", c.Op)
	}
	return out, nil
}

func (o TxnOp) op() (command.Op, error) {
	switch o.Op {
	case "put":
		return command.Op{Type: command.OpPut, Key: o.Key, Value: []byte(o.Value)}, nil
	case "get":
		return command.Op{Type: command.OpGet, Key: o.Key}, nil
	case "delete":
		return command.Op{Type: command.OpDelete, Key: o.Key}, nil
	case "get_prefix":
		return command.Op{Type: command.OpGet, Key: o.Key, Prefix: true}, nil
	case "delete_prefix":
		return command.Op{Type: command.OpDelete, Key: o.Key, Prefix: true}, nil
	}
	return command.Op{}, fmt.Errorf("unknown operation %q (put, get, delete, get_prefix or delete_prefix)", o.Op)
}

// txnResult is the root's TxnResult as JSON: what a committed
// transaction did.
type txnResult struct {
	Succeeded bool
	Rev       int64
	Results   []opResult
}

type opResult struct {
	KVs     []command.KV
	Deleted int64
}

func (n *Node) adminTxn(w http.ResponseWriter, r *http.Request) {
	// The largest transaction the limits allow fits in a frame; its JSON
	// is about as large unless its values are binary.
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(n.cfg.MaxFrameSize)))
	dec.DisallowUnknownFields()
	var req TxnRequest
	if err := dec.Decode(&req); err != nil {
		adminError(w, fmt.Errorf("%w: transaction: %w", errs.InvalidArgument, err))
		return
	}
	t, err := req.build()
	if err != nil {
		adminError(w, err)
		return
	}
	res, err := spi.Commit(r.Context(), n.Backend(), t, nil)
	if err != nil {
		adminError(w, err)
		return
	}
	out := txnResult{Succeeded: res.Succeeded, Rev: res.Rev, Results: make([]opResult, len(res.Ops))}
	for i, op := range res.Ops {
		out.Results[i] = opResult{KVs: op.KVs, Deleted: op.Deleted}
	}
	reply(w, out, nil)
}

// adminWatch streams the changes under ?prefix= after ?after= (a
// revision; default: from now on) as JSON lines, one Event each, until
// the client goes away or the watch ends. The status goes out at once,
// so an end (errs.Compacted, a slow reader cut off, the member closing)
// is a last line {"error": "..."}.
func (n *Node) adminWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := spi.DefaultWatch()
	if f := q.Get("after"); f != "" {
		rev, err := strconv.ParseInt(f, 10, 64)
		if err != nil || rev < 0 {
			adminError(w, fmt.Errorf("%w: after %q is not a revision", errs.InvalidArgument, f))
			return
		}
		o.FromRev, o.FromSet = rev, true
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	wa := spi.StartWatch(ctx, n.Backend(), q.Get("prefix"), o, func(ev spi.Event) spi.Event { return ev })
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	// The status goes out now, so that the client knows the watch is
	// set up before any change arrives.
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	for ev := range wa.Events() {
		if enc.Encode(ev) != nil || rc.Flush() != nil {
			return // the client is gone
		}
	}
	if err := wa.Err(); err != nil && r.Context().Err() == nil {
		enc.Encode(map[string]string{"error": err.Error()}) // the client may be gone
	}
}
