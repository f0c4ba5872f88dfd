package fence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordcell/coord/fence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTokenStringAndParseToken(t *testing.T) {
	for _, tok := range []fence.Token{1, 7, 10, 1234567890, math.MaxInt64} {
		got, err := fence.ParseToken(tok.String())
		require.NoError(t, err, tok)
		assert.Equal(t, tok, got)
	}
	assert.Equal(t, "0", fence.Token(0).String())
	assert.Equal(t, "9223372036854775807", fence.Token(math.MaxInt64).String())

	for _, s := range []string{
		"", "0", "00", "-1", "+1", " 1", "1 ", "\t1", "01", "007", "1.0", "1e3",
		"0x10", "abc", "1_000", "９", "9223372036854775808", "99999999999999999999",
		"-9223372036854775808", strings.Repeat("9", 1000),
	} {
		tok, err := fence.ParseToken(s)
		assert.ErrorIs(t, err, fence.ErrInvalidToken, "%q", s)
		assert.Zero(t, tok, "%q", s)
	}
}

// markStores are the stores every Fence test runs against.
func markStores() map[string]func(t *testing.T) fence.MarkStore {
	return map[string]func(t *testing.T) fence.MarkStore{
		"mem": func(*testing.T) fence.MarkStore { return fence.NewMemMarks() },
		"file": func(t *testing.T) fence.MarkStore {
			fm, err := fence.OpenFileMarks(filepath.Join(t.TempDir(), "marks"))
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, fm.Close()) })
			return fm
		},
	}
}

func TestFenceAdmitOrdering(t *testing.T) {
	for name, open := range markStores() {
		t.Run(name, func(t *testing.T) {
			f := fence.NewFence(open(t))
			mark := func(r string) fence.Token {
				m, err := f.Mark(r)
				require.NoError(t, err)
				return m
			}
			assert.Zero(t, mark("db"))

			require.NoError(t, f.Admit("db", 5))
			assert.Equal(t, fence.Token(5), mark("db"))
			require.NoError(t, f.Admit("db", 5), "the same holder writes again")

			err := f.Admit("db", 4)
			require.ErrorIs(t, err, fence.ErrStaleToken)
			assert.Contains(t, err.Error(), "token 4")
			assert.Contains(t, err.Error(), "mark 5")
			assert.Equal(t, fence.Token(5), mark("db"), "a refusal leaves the mark alone")

			require.NoError(t, f.Admit("db", 9))
			assert.ErrorIs(t, f.Admit("db", 5), fence.ErrStaleToken, "the old holder is out for good")
			assert.ErrorIs(t, f.Admit("db", 8), fence.ErrStaleToken)
			require.NoError(t, f.Admit("db", 9))

			// Resources are independent.
			require.NoError(t, f.Admit("queue", 3))
			require.NoError(t, f.Admit("", 1))
			assert.Equal(t, fence.Token(9), mark("db"))
			assert.Equal(t, fence.Token(3), mark("queue"))
			assert.Zero(t, mark("other"))

			for _, bad := range []fence.Token{0, -1, math.MinInt64} {
				assert.ErrorIs(t, f.Admit("db", bad), fence.ErrInvalidToken)
				assert.ErrorIs(t, f.Do(context.Background(), "db", bad, func() error {
					t.Error("write ran with an invalid token")
					return nil
				}), fence.ErrInvalidToken)
			}
			assert.Equal(t, fence.Token(9), mark("db"))
		})
	}
}

func TestNewFenceNilStore(t *testing.T) {
	f := fence.NewFence(nil)
	require.NoError(t, f.Admit("r", 2))
	assert.ErrorIs(t, f.Admit("r", 1), fence.ErrStaleToken)
}

// admitOp is one call in a concurrent history: its token, whether it was
// admitted, and when it was called and returned on one logical clock.
type admitOp struct {
	t         fence.Token
	ok        bool
	call, ret int64
}

// checkAdmits reports the ways a history breaks atomic admission: a token
// admitted although a higher one had been admitted before its call began,
// or refused although no higher token was admitted before it returned.
// The mark at each call's linearization point lies between those bounds,
// so an atomic Fence never triggers either.
func checkAdmits(ops []admitOp) []string {
	var bad []string
	for _, b := range ops {
		if len(bad) >= 10 {
			return append(bad, "...")
		}
		justified := false
		for _, a := range ops {
			if !a.ok || a.t <= b.t {
				continue
			}
			if b.ok && a.ret < b.call {
				bad = append(bad, fmt.Sprintf("token %d admitted after token %d had been", b.t, a.t))
			}
			if a.call < b.ret {
				justified = true
			}
		}
		if !b.ok && !justified {
			bad = append(bad, fmt.Sprintf("token %d refused before any higher token was admitted", b.t))
		}
	}
	return bad
}

func TestCheckAdmitsCatchesViolations(t *testing.T) {
	// Sequential histories (call/ret never overlap) of broken fences.
	lostUpdate := []admitOp{{t: 9, ok: true, call: 1, ret: 2}, {t: 7, ok: true, call: 3, ret: 4}}
	assert.Len(t, checkAdmits(lostUpdate), 1)
	spurious := []admitOp{{t: 3, ok: true, call: 1, ret: 2}, {t: 5, ok: false, call: 3, ret: 4}}
	assert.Len(t, checkAdmits(spurious), 1)
	equalRefused := []admitOp{{t: 5, ok: true, call: 1, ret: 2}, {t: 5, ok: false, call: 3, ret: 4}}
	assert.Len(t, checkAdmits(equalRefused), 1)
	// Overlapping calls may take effect in either order.
	overlap := []admitOp{{t: 9, ok: true, call: 1, ret: 4}, {t: 7, ok: true, call: 2, ret: 3}}
	assert.Empty(t, checkAdmits(overlap))
	refusedLate := []admitOp{{t: 7, ok: false, call: 1, ret: 4}, {t: 9, ok: true, call: 2, ret: 3}}
	assert.Empty(t, checkAdmits(refusedLate))
}

func TestFenceAdmitConcurrent(t *testing.T) {
	for name, open := range markStores() {
		t.Run(name, func(t *testing.T) {
			f := fence.NewFence(open(t))
			const workers, perWorker = 16, 200
			var clock atomic.Int64
			hist := make([][]admitOp, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for range perWorker {
						tok := fence.Token(1 + rng.IntN(2000))
						op := admitOp{t: tok, call: clock.Add(1)}
						err := f.Admit("r", tok)
						op.ret = clock.Add(1)
						op.ok = err == nil
						if err != nil && !errors.Is(err, fence.ErrStaleToken) {
							t.Errorf("Admit(%d): %v", tok, err)
						}
						hist[w] = append(hist[w], op)
					}
				}()
			}
			wg.Wait()
			var all []admitOp
			var maxOK fence.Token
			admitted := 0
			for _, h := range hist {
				all = append(all, h...)
				for _, op := range h {
					if op.ok {
						admitted++
						maxOK = max(maxOK, op.t)
					}
				}
			}
			assert.Empty(t, checkAdmits(all))
			mark, err := f.Mark("r")
			require.NoError(t, err)
			assert.Equal(t, maxOK, mark, "the mark is the highest admitted token")
			assert.Greater(t, admitted, 1)
			assert.Less(t, admitted, len(all), "some tokens were refused")
		})
	}
}

// TestFenceDoOrdersWrites has many goroutines run fenced writes with
// random tokens on one resource. The writes are recorded as they start:
// the tokens that start must never decrease, and two writes under
// different tokens must never run at once.
func TestFenceDoOrdersWrites(t *testing.T) {
	f := fence.NewFence(nil)
	const workers, perWorker = 16, 300
	var (
		mu      sync.Mutex
		last    fence.Token
		active  = map[fence.Token]int{}
		started int
		bad     []string
	)
	write := func(tok fence.Token) func() error {
		return func() error {
			mu.Lock()
			if len(bad) >= 10 {
				bad = bad[:10]
			}
			if tok < last {
				bad = append(bad, fmt.Sprintf("write under %d started after one under %d", tok, last))
			}
			for other, n := range active {
				if other != tok && n > 0 {
					bad = append(bad, fmt.Sprintf("write under %d runs beside one under %d", tok, other))
				}
			}
			last = max(last, tok)
			active[tok]++
			started++
			mu.Unlock()
			runtime.Gosched() // let others try to overtake
			mu.Lock()
			active[tok]--
			mu.Unlock()
			return nil
		}
	}
	var clock atomic.Int64
	hist := make([][]admitOp, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for i := range perWorker {
				// Rising tokens with jitter, so holders overlap and an old
				// one is often still writing when a newer one arrives.
				tok := fence.Token(1 + i*10 + rng.IntN(40))
				op := admitOp{t: tok, call: clock.Add(1)}
				err := f.Do(context.Background(), "r", tok, write(tok))
				op.ret = clock.Add(1)
				op.ok = err == nil
				if err != nil && !errors.Is(err, fence.ErrStaleToken) {
					t.Errorf("Do(%d): %v", tok, err)
				}
				hist[w] = append(hist[w], op)
			}
		}()
	}
	wg.Wait()
	assert.Empty(t, bad)
	var all, ran []admitOp
	for _, h := range hist {
		all = append(all, h...)
		for _, op := range h {
			if op.ok {
				ran = append(ran, op)
			}
		}
	}
	assert.Equal(t, len(ran), started, "Do succeeded exactly when its write ran")
	// Among the writes that ran, none ran after a higher one had. (A Do
	// may be refused for a higher token that raised the mark and was then
	// refused itself, overtaken by a still higher one; so a refusal only
	// needs some higher Do called before it returned.)
	assert.Empty(t, checkAdmits(ran))
	for _, b := range all {
		if b.ok {
			continue
		}
		justified := false
		for _, a := range all {
			justified = justified || (a.t > b.t && a.call < b.ret)
		}
		assert.True(t, justified, "token %d refused with no higher token in sight", b.t)
	}
}

func TestFenceDoWaitsForOlderWrites(t *testing.T) {
	f := fence.NewFence(nil)
	ctx := context.Background()

	oldStarted, releaseOld := make(chan struct{}), make(chan struct{})
	oldDone := make(chan error, 1)
	go func() {
		oldDone <- f.Do(ctx, "r", 5, func() error {
			close(oldStarted)
			<-releaseOld
			return errors.New("old write's own error")
		})
	}()
	<-oldStarted

	// Another write under the same token runs beside it.
	require.NoError(t, f.Do(ctx, "r", 5, func() error { return nil }))

	var newRan atomic.Bool
	newDone := make(chan error, 1)
	go func() {
		newDone <- f.Do(ctx, "r", 7, func() error {
			newRan.Store(true)
			return nil
		})
	}()
	// Once token 7 is admitted, the old holder starts nothing more.
	require.Eventually(t, func() bool { m, _ := f.Mark("r"); return m == 7 }, 5*time.Second, time.Millisecond)
	assert.ErrorIs(t, f.Do(ctx, "r", 5, func() error {
		t.Error("a write under the old token started after a newer token was admitted")
		return nil
	}), fence.ErrStaleToken)
	// The new holder's write waits while the old write runs. (A broken
	// fence fails here; a slow machine only makes the check weaker.)
	assert.Never(t, newRan.Load, 50*time.Millisecond, time.Millisecond)

	close(releaseOld)
	assert.EqualError(t, <-oldDone, "old write's own error", "Do returns the write's error")
	require.NoError(t, <-newDone)
	assert.True(t, newRan.Load())
}

func TestFenceDoContextEndsWhileWaiting(t *testing.T) {
	f := fence.NewFence(nil)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.Do(context.Background(), "r", 5, func() error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := f.Do(ctx, "r", 7, func() error {
		t.Error("write ran while an older one was running")
		return nil
	})
	assert.ErrorIs(t, err, context.Canceled)
	mark, err := f.Mark("r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(7), mark, "the mark stays raised")

	close(release)
	require.NoError(t, <-done)
	// With the old write gone, the new holder writes at once.
	require.NoError(t, f.Do(context.Background(), "r", 7, func() error { return nil }))
	assert.ErrorIs(t, f.Do(context.Background(), "r", 5, func() error { return nil }), fence.ErrStaleToken)
}

func TestFileMarksSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	f := fence.NewFence(fm)
	require.NoError(t, f.Admit("a", 3))
	require.NoError(t, f.Admit("a", 8))
	require.NoError(t, f.Admit("b", 2))
	require.NoError(t, f.Admit("", 1))
	require.NoError(t, fm.Close())
	require.NoError(t, fm.Close(), "closing again does nothing")
	_, err = fm.Raise("a", 9)
	assert.ErrorIs(t, err, fence.ErrClosed)

	fm, err = fence.OpenFileMarks(path)
	require.NoError(t, err)
	defer fm.Close()
	f = fence.NewFence(fm)
	assert.ErrorIs(t, f.Admit("a", 7), fence.ErrStaleToken, "the restarted resource still refuses the old holder")
	assertMarks(t, fm, map[string]fence.Token{"a": 8, "b": 2, "": 1, "c": 0})
}

func assertMarks(t *testing.T, s fence.MarkStore, want map[string]fence.Token) {
	t.Helper()
	for r, w := range want {
		got, err := s.Raise(r, 0)
		require.NoError(t, err)
		assert.Equal(t, w, got, "mark of %q", r)
	}
}

func TestFileMarksNoWriteWithoutChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	defer fm.Close()
	_, err = fm.Raise("a", 5)
	require.NoError(t, err)
	before := fileSize(t, path)
	for _, tok := range []fence.Token{5, 4, 0, -3} {
		got, err := fm.Raise("a", tok)
		require.NoError(t, err)
		assert.Equal(t, fence.Token(5), got)
	}
	assert.Equal(t, before, fileSize(t, path))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// writeMarks makes a marks file by raising each pair in order and returns
// the file's size after each raise.
func writeMarks(t *testing.T, path string, raises ...any) []int64 {
	t.Helper()
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	defer func() { require.NoError(t, fm.Close()) }()
	sizes := []int64{fileSize(t, path)}
	for i := 0; i < len(raises); i += 2 {
		_, err := fm.Raise(raises[i].(string), fence.Token(raises[i+1].(int)))
		require.NoError(t, err)
		sizes = append(sizes, fileSize(t, path))
	}
	return sizes
}

func TestFileMarksTornLastRecord(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	sizes := writeMarks(t, good, "a", 4, "b", 6, "a", 9)
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	lastStart := sizes[2]

	damaged := map[string][]byte{}
	for n := lastStart; n < int64(len(data)); n++ {
		damaged[fmt.Sprintf("cut at %d", n)] = data[:n]
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)-1] ^= 0x40 // the last record's checksum
	damaged["bad checksum"] = flipped
	flippedBody := append([]byte(nil), data...)
	flippedBody[lastStart+4] ^= 0x01 // the last record's token
	damaged["bad token"] = flippedBody
	damaged["zeros after"] = append(append([]byte(nil), data...), make([]byte, 100)...)
	damaged["garbage after"] = append(append([]byte(nil), data...), "\xf5\x03\x00garbage"...)

	for name, content := range damaged {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "marks")
			require.NoError(t, os.WriteFile(path, content, 0o644))
			fm, err := fence.OpenFileMarks(path)
			require.NoError(t, err)
			want := map[string]fence.Token{"a": 4, "b": 6}
			if len(content) > len(data) { // the damage follows a whole last record
				want["a"] = 9
			}
			assertMarks(t, fm, want)
			// The file was rewritten without the damage, so new records
			// after it replay too.
			_, err = fm.Raise("c", 11)
			require.NoError(t, err)
			require.NoError(t, fm.Close())
			fm, err = fence.OpenFileMarks(path)
			require.NoError(t, err)
			want["c"] = 11
			assertMarks(t, fm, want)
			require.NoError(t, fm.Close())
		})
	}
}

func TestFileMarksRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	sizes := writeMarks(t, good, "a", 4, "b", 6, "a", 9)
	data, err := os.ReadFile(good)
	require.NoError(t, err)

	middle := append([]byte(nil), data...)
	middle[sizes[1]-1] ^= 0xff // the first record's checksum: two records follow
	newer := append([]byte(nil), data...)
	newer[7] = 2 // format version

	for name, content := range map[string][]byte{
		"damaged before the last record": middle,
		"unknown version":                newer,
		"not a marks file":               []byte("hello, this is not a marks file"),
		"short header":                   data[:5],
		"long garbage":                   append(append([]byte(nil), data[:8]...), make([]byte, 10000)...),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "marks")
			require.NoError(t, os.WriteFile(path, content, 0o644))
			fm, err := fence.OpenFileMarks(path)
			require.ErrorIs(t, err, fence.ErrMarksFormat)
			assert.Nil(t, fm)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, content, after, "a refused file is left as it was")
		})
	}
	t.Run("unknown version is named", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "marks")
		require.NoError(t, os.WriteFile(path, newer, 0o644))
		_, err := fence.OpenFileMarks(path)
		assert.ErrorContains(t, err, "version 2")
	})
}

func TestFileMarksCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	_, err = fm.Raise("other", 3)
	require.NoError(t, err)
	long := strings.Repeat("r", 4000) // big records make the log grow fast
	var sizes []int64
	for tok := 1; tok <= 200; tok++ {
		got, err := fm.Raise(long, fence.Token(tok))
		require.NoError(t, err)
		require.Equal(t, fence.Token(tok), got)
		sizes = append(sizes, fileSize(t, path))
	}
	shrank := false
	for i := 1; i < len(sizes); i++ {
		shrank = shrank || sizes[i] < sizes[i-1]
	}
	assert.True(t, shrank, "the log was compacted")
	assert.Less(t, sizes[len(sizes)-1], int64(200*4000/2), "the log stays bounded")
	_, err = os.Stat(path + ".tmp")
	assert.ErrorIs(t, err, os.ErrNotExist, "no leftover")
	require.NoError(t, fm.Close())

	fm, err = fence.OpenFileMarks(path)
	require.NoError(t, err)
	defer fm.Close()
	assertMarks(t, fm, map[string]fence.Token{long: 200, "other": 3})
}

func TestFileMarksLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "marks")
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	defer fm.Close()

	_, err = fence.OpenFileMarks(path)
	assert.Error(t, err, "one FileMarks per file")
	_, err = fence.OpenFileMarks(filepath.Join(dir, ".", "marks"))
	assert.Error(t, err, "however the path is spelled")

	_, err = fm.Raise(strings.Repeat("x", 4097), 1)
	assert.ErrorIs(t, err, fence.ErrInvalidKey)
	got, err := fm.Raise(strings.Repeat("x", 4096), 1)
	require.NoError(t, err)
	assert.Equal(t, fence.Token(1), got)

	_, err = fence.OpenFileMarks(filepath.Join(dir, "no", "such", "dir", "marks"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// An empty file (made by an operator, say) is a new marks file.
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	fe, err := fence.OpenFileMarks(empty)
	require.NoError(t, err)
	require.NoError(t, fe.Close())
}

func TestFileMarksReopenAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	for i := 1; i <= 3; i++ {
		fm, err := fence.OpenFileMarks(path)
		require.NoError(t, err)
		assertMarks(t, fm, map[string]fence.Token{"r": fence.Token(i - 1)})
		_, err = fm.Raise("r", fence.Token(i))
		require.NoError(t, err)
		require.NoError(t, fm.Close())
	}
}

// FuzzOpenFileMarks opens arbitrary bytes after a valid header: it must
// either work, with positive marks, or refuse with ErrMarksFormat, and
// never panic.
func FuzzOpenFileMarks(f *testing.F) {
	dir := f.TempDir()
	sample := filepath.Join(dir, "sample")
	fm, err := fence.OpenFileMarks(sample)
	require.NoError(f, err)
	for i, r := range []string{"a", "bb", "a", ""} {
		_, err := fm.Raise(r, fence.Token(i+1))
		require.NoError(f, err)
	}
	require.NoError(f, fm.Close())
	data, err := os.ReadFile(sample)
	require.NoError(f, err)
	f.Add(data)
	f.Add(data[:len(data)-3])
	f.Add(data[:8])
	f.Add(append(data[:8:8], 0xf5, 0xff, 0xff))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, content []byte) {
		path := filepath.Join(dir, fmt.Sprint(n.Add(1)))
		require.NoError(t, os.WriteFile(path, content, 0o644))
		defer os.Remove(path)
		fm, err := fence.OpenFileMarks(path)
		if err != nil {
			require.ErrorIs(t, err, fence.ErrMarksFormat)
			return
		}
		defer fm.Close()
		for _, r := range []string{"a", "bb", ""} {
			got, err := fm.Raise(r, 0)
			require.NoError(t, err)
			require.GreaterOrEqual(t, got, fence.Token(0))
		}
	})
}

func TestTokenHeader(t *testing.T) {
	h := http.Header{}
	fence.SetToken(h, 42)
	assert.Equal(t, "42", h.Get("Coord-Fencing-Token"))
	r := httptest.NewRequest(http.MethodPut, "/x", nil)
	r.Header = h
	tok, err := fence.TokenFrom(r)
	require.NoError(t, err)
	assert.Equal(t, fence.Token(42), tok)

	fence.SetToken(h, 0)
	assert.Empty(t, h.Values(fence.TokenHeader))
	_, err = fence.TokenFrom(r)
	assert.ErrorIs(t, err, fence.ErrInvalidToken)

	h.Add(fence.TokenHeader, "5")
	h.Add(fence.TokenHeader, "6")
	_, err = fence.TokenFrom(r)
	assert.ErrorIs(t, err, fence.ErrInvalidToken, "two tokens are ambiguous")

	_, ok := fence.TokenFromContext(context.Background())
	assert.False(t, ok)
}

func TestFenceMiddleware(t *testing.T) {
	f := fence.NewFence(nil)
	var seen []string
	h := f.Middleware(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			tok, ok := fence.TokenFromContext(r.Context())
			require.True(t, ok)
			mark, err := f.Mark(r.URL.Path)
			require.NoError(t, err)
			assert.Equal(t, tok, mark, "the mark is raised before the handler runs")
			seen = append(seen, fmt.Sprintf("%s@%d", r.URL.Path, tok))
			w.WriteHeader(http.StatusNoContent)
		}))
	do := func(path string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPut, path, strings.NewReader("data"))
		for _, v := range header {
			r.Header.Add(fence.TokenHeader, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	assert.Equal(t, http.StatusBadRequest, do("/a").Code, "no token")
	assert.Equal(t, http.StatusBadRequest, do("/a", "x1").Code, "malformed")
	assert.Equal(t, http.StatusBadRequest, do("/a", "0").Code, "zero")
	assert.Equal(t, http.StatusBadRequest, do("/a", "5", "6").Code, "two tokens")
	assert.Equal(t, http.StatusNoContent, do("/a", "5").Code)
	assert.Equal(t, http.StatusNoContent, do("/a", "5").Code, "same token again")
	assert.Equal(t, http.StatusNoContent, do("/a", "8").Code)
	stale := do("/a", "5")
	assert.Equal(t, http.StatusConflict, stale.Code)
	assert.Contains(t, stale.Body.String(), "stale fencing token")
	assert.Equal(t, http.StatusNoContent, do("/b", "2").Code, "resources are independent")
	assert.Equal(t, []string{"/a@5", "/a@5", "/a@8", "/b@2"}, seen, "refused requests never reach the handler")
}

func TestFenceMiddlewareWaitingRequestEnds(t *testing.T) {
	f := fence.NewFence(nil)
	started, release := make(chan struct{}), make(chan struct{})
	h := f.Middleware(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, _ := fence.TokenFromContext(r.Context()); tok == 5 {
			close(started)
			<-release
		}
	}))
	oldDone := make(chan int, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		fence.SetToken(r.Header, 5)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		oldDone <- w.Code
	}()
	<-started

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	fence.SetToken(r.Header, 7)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)

	close(release)
	assert.Equal(t, http.StatusOK, <-oldDone)
}

func TestZeroFenceIsUsable(t *testing.T) {
	var f fence.Fence
	require.NoError(t, f.Admit("r", 5))
	require.ErrorIs(t, f.Admit("r", 4), fence.ErrStaleToken)
	require.NoError(t, f.Do(context.Background(), "r", 6, func() error { return nil }))
	require.ErrorIs(t, f.Do(context.Background(), "r", 5, func() error { return nil }), fence.ErrStaleToken)
}

// holdMarksEnv makes the test binary, run as a child, hold a marks file
// open (see holdMarks) for TestFileMarksRefusedWhileOpenElsewhere.
const holdMarksEnv = "COORD_TEST_HOLD_MARKS"

// holdMarks opens the marks file at path, says "held" on stdout and keeps
// it open until stdin closes.
func holdMarks(path string) {
	fm, err := fence.OpenFileMarks(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
	fm.Close()
}

// Only one FileMarks may use a file at a time, in this process or any
// other: two writers would each trust marks the other never saw.
func TestFileMarksRefusedWhileOpenElsewhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks")
	fm, err := fence.OpenFileMarks(path)
	require.NoError(t, err)
	_, err = fence.OpenFileMarks(path)
	require.ErrorIs(t, err, fence.ErrMarksInUse, "open twice in one process")
	require.NoError(t, fm.Close())

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holdMarksEnv+"="+path)
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)

	_, err = fence.OpenFileMarks(path)
	require.ErrorIs(t, err, fence.ErrMarksInUse, "open in another process")

	require.NoError(t, stdin.Close())
	require.NoError(t, child.Wait())
	fm, err = fence.OpenFileMarks(path)
	require.NoError(t, err, "free once the other process closed it")
	require.NoError(t, fm.Close())
}
