package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/coordcell/coord"
)

// output prints a command's answer as JSON or as a table.
type output struct {
	w    io.Writer
	json bool
}

// print writes v as JSON, or calls table with a tab-separated writer.
func (o output) print(v any, table func(w io.Writer)) error {
	if o.json {
		enc := json.NewEncoder(o.w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(o.w, 0, 0, 1, ' ', tabwriter.Debug)
	table(tw)
	return tw.Flush()
}

func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

func dispatch(ctx context.Context, c *client, out output, args []string) error {
	cmd, args := args[0], args[1:]
	switch cmd {
	case "status":
		var rep coord.StatusReport
		if err := c.do(ctx, http.MethodGet, "/admin/status", nil, nil, &rep); err != nil {
			return err
		}
		return out.print(rep, func(w io.Writer) {
			row(w, "MEMBER", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "REVISION", "SESSIONS", "READY")
			ready := "yes"
			if !rep.Ready {
				ready = "no: " + rep.NotReady
			}
			row(w, rep.Member, rep.Role, rep.Term, rep.Leader, rep.Commit, rep.Applied, rep.Revision, rep.Sessions, ready)
		})
	case "members":
		return members(ctx, c, out, args)
	case "get":
		if err := need(args, 1, "get KEY"); err != nil {
			return err
		}
		var kv coord.KV
		if err := c.do(ctx, http.MethodGet, "/admin/kv", url.Values{"key": args}, nil, &kv); err != nil {
			return err
		}
		return out.print(kv, func(w io.Writer) { kvTable(w, []coord.KV{kv}) })
	case "put":
		if err := need(args, 2, "put KEY VALUE"); err != nil {
			return err
		}
		var kv coord.KV
		err := c.do(ctx, http.MethodPut, "/admin/kv", url.Values{"key": args[:1]}, strings.NewReader(args[1]), &kv)
		if err != nil {
			return err
		}
		return out.print(kv, func(w io.Writer) { kvTable(w, []coord.KV{kv}) })
	case "del":
		if err := need(args, 1, "del KEY"); err != nil {
			return err
		}
		var res struct {
			Revision int64 `json:"revision"`
		}
		if err := c.do(ctx, http.MethodDelete, "/admin/kv", url.Values{"key": args}, nil, &res); err != nil {
			return err
		}
		return out.print(res, func(w io.Writer) { row(w, "REVISION"); row(w, res.Revision) })
	case "list":
		if len(args) > 1 {
			return fmt.Errorf("%w: coordctl list [PREFIX]", errUsage)
		}
		var rep coord.ListReport
		if err := c.do(ctx, http.MethodGet, "/admin/list", url.Values{"prefix": append(args, "")[:1]}, nil, &rep); err != nil {
			return err
		}
		return out.print(rep, func(w io.Writer) { kvTable(w, rep.KVs) })
	case "sessions":
		if len(args) > 0 {
			return revoke(ctx, c, out, args)
		}
		var ss []coord.SessionReport
		if err := c.do(ctx, http.MethodGet, "/admin/sessions", nil, nil, &ss); err != nil {
			return err
		}
		return out.print(ss, func(w io.Writer) {
			row(w, "ID", "TTL", "UNHEARD", "EPHEMERAL KEYS")
			for _, s := range ss {
				row(w, s.ID, s.TTL, s.Unheard, s.Keys)
			}
		})
	case "locks":
		var ls []coord.LockReport
		if err := c.do(ctx, http.MethodGet, "/admin/locks", nil, nil, &ls); err != nil {
			return err
		}
		return out.print(ls, func(w io.Writer) {
			row(w, "LOCK", "POSITION", "SESSION", "TOKEN", "KEY")
			for _, l := range ls {
				// A lock in lock-delay has no holder: its marker comes
				// first and every entry waits behind it.
				if d := l.LockDelay; d != nil {
					row(w, l.Name, fmt.Sprintf("lock-delay %v from rev %d, no holder", d.Delay, d.Revision), "-", "-", d.Key)
				}
				for i, q := range l.Queue {
					pos := position(i, "holder", "waiter")
					if !l.Held {
						pos = fmt.Sprintf("waiter %d", i+1)
					}
					row(w, l.Name, pos, q.Session, q.Token, q.Key)
				}
			}
		})
	case "elections":
		var es []coord.ElectionReport
		if err := c.do(ctx, http.MethodGet, "/admin/elections", nil, nil, &es); err != nil {
			return err
		}
		return out.print(es, func(w io.Writer) {
			row(w, "GROUP", "POSITION", "VALUE", "SESSION", "TOKEN")
			for _, e := range es {
				for i, q := range e.Candidates {
					row(w, e.Group, position(i, "leader", "candidate"), q.Value, q.Session, q.Token)
				}
			}
		})
	case "txn":
		if err := need(args, 1, "txn FILE (a JSON coord.TxnRequest; - reads standard input)"); err != nil {
			return err
		}
		return txn(ctx, c, out, args[0])
	case "watch":
		if len(args) < 1 || len(args) > 2 {
			return fmt.Errorf("%w: coordctl watch PREFIX [AFTER_REVISION]", errUsage)
		}
		return watch(ctx, c, out, args)
	case "compact", "defrag":
		return fmt.Errorf("%w: %s: the cell compacts its log and history by itself (Config.CompactEvery, HistoryRevisions) and Pebble compacts its files; there is nothing to run", errUsage, cmd)
	case "client":
		if len(args) == 0 || args[0] != "issue" {
			return fmt.Errorf("%w: coordctl client issue -secret-file FILE [-pem DIR] NAME [GENERATION]", errUsage)
		}
		return clientIssue(out, args[1:])
	case "snapshot":
		if err := need(args, 2, "snapshot save FILE"); err != nil || args[0] != "save" {
			return fmt.Errorf("%w: coordctl snapshot save FILE", errUsage)
		}
		return snapshotSave(ctx, c, out, args[1])
	}
	return fmt.Errorf("%w: unknown command %q (coordctl -h lists them)", errUsage, cmd)
}

func position(i int, first, rest string) string {
	if i == 0 {
		return first
	}
	return fmt.Sprintf("%s %d", rest, i)
}

func kvTable(w io.Writer, kvs []coord.KV) {
	row(w, "KEY", "VALUE", "VERSION", "CREATE REV", "MOD REV", "SESSION")
	for _, kv := range kvs {
		row(w, kv.Key, fmt.Sprintf("%q", kv.Value), kv.Version, kv.CreateRev, kv.ModRev, kv.Session)
	}
}

func members(ctx context.Context, c *client, out output, args []string) error {
	if len(args) == 0 {
		var ms []coord.MemberHealth
		if err := c.do(ctx, http.MethodGet, "/admin/members", nil, nil, &ms); err != nil {
			return err
		}
		return out.print(ms, func(w io.Writer) {
			row(w, "NAME", "ADDRESS", "ROLE", "LEADER", "HEALTH", "MATCH")
			for _, m := range ms {
				row(w, m.Name, m.Addr, m.Role, m.Leader, m.Health, m.Match)
			}
		})
	}
	req := coord.MemberRequest{}
	switch args[0] {
	case "add-learner":
		if err := need(args, 3, "members add-learner NAME ADDR"); err != nil {
			return err
		}
		req.Name, req.Addr = args[1], args[2]
	case "promote", "remove":
		if err := need(args, 2, "members "+args[0]+" NAME"); err != nil {
			return err
		}
		req.Name = args[1]
	default:
		return fmt.Errorf("%w: unknown members command %q", errUsage, args[0])
	}
	var res map[string]string
	if err := c.do(ctx, http.MethodPost, "/admin/members/"+args[0], nil, jsonBody(req), &res); err != nil {
		return err
	}
	return out.print(res, func(w io.Writer) { row(w, "MEMBER", "DONE"); row(w, req.Name, args[0]) })
}

// snapshotSave writes the backup to a file beside FILE and renames it
// only once the whole backup has been read and checked, so FILE is
// never a partial backup.
func snapshotSave(ctx context.Context, c *client, out output, file string) error {
	resp, err := c.send(ctx, http.MethodGet, "/admin/backup", nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	tmp := file + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	info, _, err := coord.ReadBackup(io.TeeReader(resp.Body, f))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	res := struct {
		File string `json:"file"`
		coord.BackupInfo
	}{file, info}
	return out.print(res, func(w io.Writer) {
		row(w, "FILE", "REVISION", "KEYS", "MEMBER", "SHA256")
		row(w, file, info.Revision, info.Keys, info.Member, info.Checksum)
	})
}
