package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/coordcell/coord"
)

// maxTxnFile bounds the transaction file read into memory; the member
// bounds what it accepts on its own.
const maxTxnFile = 64 << 20

func revoke(ctx context.Context, c *client, out output, args []string) error {
	if len(args) != 2 || args[0] != "revoke" {
		return fmt.Errorf("%w: coordctl sessions revoke ID", errUsage)
	}
	var res struct {
		Session  int64 `json:"session"`
		Revision int64 `json:"revision"`
	}
	if err := c.do(ctx, http.MethodDelete, "/admin/sessions/"+url.PathEscape(args[1]), nil, nil, &res); err != nil {
		return err
	}
	return out.print(res, func(w io.Writer) {
		row(w, "SESSION", "REVOKED AT REVISION")
		row(w, res.Session, res.Revision)
	})
}

// txn sends the transaction in file after checking that it parses, so
// that a typo is reported with its line rather than by the member.
func txn(ctx context.Context, c *client, out output, file string) error {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxTxnFile+1))
	if err != nil {
		return err
	}
	if len(raw) > maxTxnFile {
		return fmt.Errorf("%w: %s is larger than %d bytes", errUsage, file, maxTxnFile)
	}
	var req coord.TxnRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return fmt.Errorf("%w: %s: %w", errUsage, file, err)
	}
	var res coord.TxnResult
	if err := c.do(ctx, http.MethodPost, "/admin/txn", nil, jsonBody(req), &res); err != nil {
		return err
	}
	return out.print(res, func(w io.Writer) {
		branch := "else"
		if res.Succeeded {
			branch = "then"
		}
		row(w, "SUCCEEDED", "BRANCH", "REVISION")
		row(w, res.Succeeded, branch, res.Rev)
		for i, r := range res.Results {
			fmt.Fprintf(w, "\n%s[%d]: deleted %d\n", branch, i, r.Deleted)
			if len(r.KVs) > 0 {
				kvTable(w, r.KVs)
			}
		}
	})
}

// watch prints each change under the prefix as it arrives, one line
// each (or one JSON object each), until interrupted or the watch ends.
func watch(ctx context.Context, c *client, out output, args []string) error {
	q := url.Values{"prefix": args[:1]}
	if len(args) == 2 {
		q.Set("after", args[1])
	}
	resp, err := c.send(ctx, http.MethodGet, "/admin/watch", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	// A line holds one event: a key and a value within the cell's limits,
	// escaped; 16 MiB is far above the defaults.
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			coord.Event
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("watch: bad line from the member: %w", err)
		}
		if line.Error != "" {
			return fmt.Errorf("watch ended: %s", line.Error)
		}
		if out.json {
			if _, err := fmt.Fprintf(out.w, "%s\n", sc.Bytes()); err != nil {
				return err
			}
			continue
		}
		ev := line.Event
		if _, err := fmt.Fprintf(out.w, "%d\t%s\t%s\t%q\n", ev.Rev, ev.Type, ev.KV.Key, ev.KV.Value); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted, or --timeout: the end the user asked for
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("watch ended: the member closed the stream")
}
