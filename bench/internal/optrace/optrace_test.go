package optrace

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A trace of known calls: 8 workers make 5 calls each, every call
// blocked on a timer for 2ms, and one goroutine fsyncs a file.
func TestReadSplitsCallsAndFindsFsyncs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				r := trace.StartRegion(context.Background(), "op")
				<-time.After(2 * time.Millisecond)
				r.End()
				trace.WithRegion(context.Background(), "not-an-op", func() {})
			}
		})
	}
	var syncErr error
	wg.Go(func() {
		f, err := os.Create(file)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		syncErr = err
	})
	wg.Wait()
	trace.Stop()
	if syncErr != nil {
		t.Fatal(syncErr)
	}

	rep, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ops) != 40 {
		t.Fatalf("%d calls, want 40", len(rep.Ops))
	}
	for i, o := range rep.Ops {
		if o.Dur() < 2*time.Millisecond || o.Blocked < time.Millisecond {
			t.Errorf("call %d: %+v: shorter than its 2ms block, or not blocked", i, o)
		}
		if parts := o.Running + o.Runnable + o.Blocked + o.Syscall; parts > o.Dur() {
			t.Errorf("call %d: %+v: its parts (%v) exceed it", i, o, parts)
		}
		if i > 0 && o.Dur() < rep.Ops[i-1].Dur() {
			t.Errorf("calls not sorted by latency at %d", i)
		}
	}
	if len(rep.Fsyncs["other"]) != 1 {
		t.Errorf("fsyncs %v, want the file's one as other", rep.Fsyncs)
	}

	var out strings.Builder
	rep.Write(&out)
	for _, want := range []string{"40 calls", "fsyncs, other: 1,", "episodes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report without %q:\n%s", want, out.String())
		}
	}
}

func TestReadRefusesWhatIsNotATrace(t *testing.T) {
	if _, err := Read(strings.NewReader("not a trace")); err == nil {
		t.Fatal("no error")
	}
}

func TestWriteWithoutCalls(t *testing.T) {
	var out strings.Builder
	(&Report{}).Write(&out)
	if !strings.Contains(out.String(), "no operations") {
		t.Fatalf("report: %q", out.String())
	}
}
