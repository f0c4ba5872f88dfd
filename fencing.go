package coord

import (
	"context"
	"net/http"

	"github.com/coordcell/coord/fence"
)

// Fencing is implemented in package fence, which imports only the
// standard library so that a resource that only checks tokens need not
// link the cell. The names below are its face in this package: they are
// the same types and functions, so values pass between the two freely.

// Token is a fencing token: the cell revision at which a lock or a
// leadership was granted. Every grant in a cell carries a token strictly
// greater than every earlier grant's. See fence.Token.
type Token = fence.Token

// MarkStore keeps a resource's high-water marks. See fence.MarkStore.
type MarkStore = fence.MarkStore

// Fence is the resource-side check of fencing tokens. See fence.Fence.
type Fence = fence.Fence

// FileMarks is a MarkStore kept in a file. See fence.FileMarks.
type FileMarks = fence.FileMarks

// TokenHeader is the HTTP header that carries a fencing token.
const TokenHeader = fence.TokenHeader

// ParseToken reads a token in the form Token.String writes; anything else
// gives an error wrapping ErrInvalidToken.
func ParseToken(s string) (Token, error) { return fence.ParseToken(s) }

// NewMemMarks returns a MarkStore that keeps its marks in memory.
func NewMemMarks() MarkStore { return fence.NewMemMarks() }

// NewFence returns a Fence that keeps its marks in store (nil = in memory).
func NewFence(store MarkStore) *Fence { return fence.NewFence(store) }

// OpenFileMarks opens, or creates, the marks file at path.
func OpenFileMarks(path string) (*FileMarks, error) { return fence.OpenFileMarks(path) }

// SetToken puts t in h's TokenHeader.
func SetToken(h http.Header, t Token) { fence.SetToken(h, t) }

// TokenFrom reads the token a request carries in TokenHeader.
func TokenFrom(r *http.Request) (Token, error) { return fence.TokenFrom(r) }

// TokenFromContext returns the token Fence.Middleware admitted for the
// request whose context is ctx, and whether there is one.
func TokenFromContext(ctx context.Context) (Token, bool) { return fence.TokenFromContext(ctx) }
