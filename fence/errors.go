package fence

import "errors"

// The sentinel errors of fencing. The root package re-exports them as
// coord.ErrStaleToken and so on, so a caller may match either name.
var (
	// ErrClosed: the FileMarks (or, in the root package, the node) is
	// closed. coord.ErrClosed is this same value, so one errors.Is check
	// covers both.
	ErrClosed = errors.New("coord: closed")
	// ErrInvalidKey: a resource name (or, in the root package, a key) is
	// unusable, such as longer than a FileMarks record allows.
	// coord.ErrInvalidKey is this same value.
	ErrInvalidKey = errors.New("coord: invalid key")
	// ErrStaleToken: a Fence refused a token lower than the highest it has
	// admitted for the resource: the holder has lost its lock or
	// leadership. The write must not happen.
	ErrStaleToken = errors.New("coord: stale fencing token")
	// ErrInvalidToken: a fencing token is missing, malformed or not
	// positive (0 means "no token").
	ErrInvalidToken = errors.New("coord: invalid fencing token")
	// ErrMarksFormat: OpenFileMarks found a file it cannot use: not a marks
	// file, an unknown format version, or damage before its last record
	// (a torn last record, left by a crash mid-write, is not an error).
	ErrMarksFormat = errors.New("coord: unusable fencing marks file")
	// ErrMarksInUse: OpenFileMarks found the file open by another
	// FileMarks, in this process or another one; two writers would each
	// trust marks the other does not see.
	ErrMarksInUse = errors.New("coord: fencing marks file in use")
	// ErrMarkStore: a MarkStore broke its contract (Raise returned a mark
	// below the token it was asked to raise to). The write must not happen;
	// the store implementation is at fault.
	ErrMarkStore = errors.New("coord: fencing mark store broke its contract")
)
