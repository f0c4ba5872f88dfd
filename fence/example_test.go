package fence_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/coordcell/coord/fence"
)

// A storage service guards a job's result with a Fence. The leader that
// held token 7 is paused (a long GC, say) and loses its leadership; the
// new leader writes with token 9; when the old leader wakes up and writes,
// its stale token is refused.
func ExampleFence() {
	f := fence.NewFence(nil) // marks in memory; see OpenFileMarks

	write := func(who string, t fence.Token) {
		if err := f.Admit("jobs/42/result", t); err != nil {
			fmt.Printf("%s (token %v): refused: %v (stale: %t)\n", who, t, err, errors.Is(err, fence.ErrStaleToken))
			return
		}
		fmt.Printf("%s (token %v): written\n", who, t)
	}

	write("old leader", 7)
	write("new leader", 9)
	write("old leader", 7) // after its pause
	write("new leader", 9)

	// Output:
	// old leader (token 7): written
	// new leader (token 9): written
	// old leader (token 7): refused: coord: stale fencing token: token 7 for "jobs/42/result" is below its mark 9 (stale: true)
	// new leader (token 9): written
}

// The HTTP side: the writer sends its token in the Coord-Fencing-Token
// header, and the middleware refuses stale ones with 409 Conflict before
// the handler runs.
func ExampleFence_Middleware() {
	f := fence.NewFence(nil)
	store := f.Middleware(
		func(r *http.Request) string { return r.URL.Path }, // one mark per path
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t, _ := fence.TokenFromContext(r.Context())
			fmt.Fprintf(w, "stored with token %v", t)
		}))

	put := func(t fence.Token) {
		r := httptest.NewRequest(http.MethodPut, "/jobs/42/result", nil)
		fence.SetToken(r.Header, t)
		w := httptest.NewRecorder()
		store.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Body.String())
	}
	put(9)
	put(7)

	// Output:
	// 200 stored with token 9
	// 409 coord: stale fencing token: token 7 for "/jobs/42/result" is below its mark 9
}
