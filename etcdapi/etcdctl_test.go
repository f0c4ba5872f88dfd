package etcdapi

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coordcell/coord"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildEtcdctl builds etcdctl (go.etcd.io/etcd/etcdctl/v3, a tool of
// this module) into a temporary directory, or skips the test when the
// module cannot be had.
func buildEtcdctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "etcdctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "go.etcd.io/etcd/etcdctl/v3").CombinedOutput()
	if err != nil {
		t.Skipf("cannot build etcdctl (go.etcd.io/etcd/etcdctl/v3 not fetchable?): %v\n%s", err, out)
	}
	return bin
}

// ctl runs etcdctl against eps.
type ctl struct {
	t   *testing.T
	bin string
	eps string
}

func (c ctl) cmd(ctx context.Context, stdin string, args ...string) *exec.Cmd {
	args = append([]string{"--endpoints=" + c.eps, "--command-timeout=30s", "--dial-timeout=10s"}, args...)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return cmd
}

// run runs one command to its end and returns its output.
func (c ctl) run(args ...string) string {
	return c.runIn("", args...)
}

func (c ctl) runIn(stdin string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, stdin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(c.t, err, "etcdctl %v: %s%s", args, out, stderr.String())
	return string(out)
}

// until starts a command that does not end by itself and returns once
// its output has a line matching want, then stops it.
func (c ctl) until(want string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, "", args...)
	out, err := cmd.StdoutPipe()
	require.NoError(c.t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(c.t, cmd.Start())
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	var seen strings.Builder
	re := regexp.MustCompile(want)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if re.MatchString(sc.Text()) {
			return seen.String()
		}
	}
	c.t.Fatalf("etcdctl %v ended without %q:\n%s", args, want, seen.String())
	return ""
}

// TestEtcdctl drives a 3-member cell with etcdctl through a scripted
// session.
func TestEtcdctl(t *testing.T) {
	bin := buildEtcdctl(t)
	f := newFront(t, nil)
	c := ctl{t: t, bin: bin, eps: strings.Join(f.eps, ",")}

	assert.Equal(t, "OK\n", c.run("put", "app/a", "1"))
	c.run("put", "app/b", "2")
	c.run("put", "app/c", "3")
	c.run("put", "app/a", "4")
	assert.Equal(t, "app/a\n4\napp/b\n2\n", c.run("get", "app/", "--prefix", "--limit=2"))
	rev := regexp.MustCompile(`"revision":(\d+)`).FindStringSubmatch(c.run("get", "app/b", "-w", "json"))
	require.NotNil(t, rev)
	// At the revision of the last write, app/a is 4; one before, 1.
	assert.Equal(t, "app/a\n1\n", c.run("get", "app/a", "--rev="+dec(rev[1])))
	assert.Equal(t, "1\n", c.run("del", "app/c"))
	assert.Equal(t, "app/a\n\napp/b\n\n", c.run("get", "app/", "--prefix", "--keys-only"))

	out := c.runIn("value(\"app/a\") = \"4\"\n\nput app/t yes\n\nput app/t no\n\n", "txn")
	assert.Equal(t, "SUCCESS\n\nOK\n", out)
	assert.Equal(t, "yes\n", c.run("get", "app/t", "--print-value-only"))

	out = c.until(`^yes$`, "watch", "app/t", "--rev=1")
	assert.Equal(t, "PUT\napp/t\nyes\n", out)

	grant := c.run("lease", "grant", "30")
	id := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(grant)
	require.NotNil(t, id, grant)
	c.run("put", "app/l", "v", "--lease="+id[1])
	assert.Contains(t, c.run("lease", "keep-alive", "--once", id[1]), "keepalived with TTL(30)")
	assert.Contains(t, c.run("lease", "timetolive", "--keys", id[1]), "attached keys([app/l])")
	assert.Contains(t, c.run("lease", "revoke", id[1]), "revoked")
	assert.Empty(t, c.run("get", "app/l"))

	assert.Contains(t, c.run("lock", "mylock", "echo", "held"), "held")
	out = c.until(`^p1$`, "elect", "myelection", "p1")
	assert.Contains(t, out, "myelection/")

	members := c.run("member", "list")
	assert.Equal(t, 3, strings.Count(members, "started"), members)
	status := c.run("endpoint", "status")
	assert.Equal(t, 3, strings.Count(status, ", 3.7.3, 3.7.3,"), status)
	assert.Equal(t, 1, strings.Count(status, ", true, false,"), "one leader: %s", status)
	assert.Contains(t, c.run("endpoint", "health"), "is healthy")
	snap := filepath.Join(t.TempDir(), "snap.db")
	one := ctl{t: t, bin: bin, eps: f.eps[0]}
	assert.Contains(t, one.run("snapshot", "save", snap), "Snapshot saved")
	fh, err := os.Open(snap)
	require.NoError(t, err)
	defer fh.Close()
	_, kvs, err := coord.ReadBackup(fh)
	require.NoError(t, err, "the snapshot is a coord backup")
	assert.NotEmpty(t, kvs)
}

// dec is n-1 in decimal.
func dec(n string) string {
	var v int64
	for _, ch := range n {
		v = v*10 + int64(ch-'0')
	}
	return itoa(v - 1)
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}
