// Package repo locates the repository's source tree, for tests and development commands that read
// its files (events/ samples) or build from it (functions/, tools/sqslocal).
package repo

import (
	"path/filepath"
	"runtime"
)

// Root is the repository's root directory: the source tree this binary was built from.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
