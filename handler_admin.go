package coord

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
		kv, err := n.Get(r.Context(), r.URL.Query().Get("key"))
		reply(w, kv, err)
	})
	mux.HandleFunc("PUT /admin/kv", func(w http.ResponseWriter, r *http.Request) {
		val, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(n.cfg.MaxValueSize)+1))
		if err != nil {
			adminError(w, errors.Join(ErrInvalidArgument, err))
			return
		}
		kv, err := n.Put(r.Context(), r.URL.Query().Get("key"), val)
		reply(w, kv, err)
	})
	mux.HandleFunc("DELETE /admin/kv", func(w http.ResponseWriter, r *http.Request) {
		rev, err := n.Delete(r.Context(), r.URL.Query().Get("key"))
		reply(w, map[string]int64{"revision": rev}, err)
	})
	mux.HandleFunc("GET /admin/list", func(w http.ResponseWriter, r *http.Request) {
		kvs, rev, err := n.List(r.Context(), r.URL.Query().Get("prefix"))
		reply(w, ListReport{KVs: kvs, Revision: rev}, err)
	})
	for path, pick := range map[string]func(inspection) any{
		"GET /admin/sessions":  func(in inspection) any { return in.Sessions },
		"GET /admin/locks":     func(in inspection) any { return in.Locks },
		"GET /admin/elections": func(in inspection) any { return in.Elections },
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			in := n.inspect(r.Context())
			if in.Err != "" {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": in.Err})
				return
			}
			writeJSON(w, http.StatusOK, pick(in))
		})
	}
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
	KVs      []KV  `json:"kvs"`
	Revision int64 `json:"revision"`
}

// MemberRequest is the body of the admin API's membership changes.
type MemberRequest struct {
	Name string `json:"name"`
	Addr string `json:"addr,omitempty"` // for add-learner
}

func (n *Node) adminMembers(w http.ResponseWriter, r *http.Request) {
	var req MemberRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		adminError(w, errors.Join(ErrInvalidArgument, err))
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
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownMember):
		code = http.StatusNotFound
	case errors.Is(err, ErrConflict), errors.Is(err, ErrMemberExists):
		code = http.StatusConflict
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrInvalidKey),
		errors.Is(err, ErrKeyTooLarge), errors.Is(err, ErrValueTooLarge),
		errors.Is(err, ErrInvalidConfig):
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
