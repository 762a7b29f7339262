package console

import (
	"crypto/subtle"
	"embed"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// static holds the console's pages: index.html and the files it loads, served at /ui/static/.
//
//go:embed static
var static embed.FS

// files is static with the static/ prefix taken off.
var files, _ = fs.Sub(static, "static")

// serveStatic serves the file name of fsys (an escaped path; fsys is files but in tests), with the content type
// its extension names, or a JSON 404. Directories are not listed.
func serveStatic(w http.ResponseWriter, r *http.Request, fsys fs.FS, name string) {
	name, err := url.PathUnescape(name)
	if err != nil || !fs.ValidPath(name) || name == "." {
		writeError(w, http.StatusNotFound, "no such file")
		return
	}
	f, err := fsys.Open(name)
	if err != nil {
		writeError(w, http.StatusNotFound, "no such file")
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		writeError(w, http.StatusNotFound, "no such file")
		return
	}
	// The pages change with the binary: a browser revalidates each time rather than keep an old one.
	w.Header().Set("Cache-Control", "no-cache")
	// An embedded file has no modification time; ServeContent sets the type from the extension.
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		writeError(w, http.StatusNotFound, "no such file")
		return
	}
	http.ServeContent(w, r, name, time.Time{}, rs)
}

// validToken compares a request's CSRF token with the session's in constant time.
func validToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// quote quotes a value a request sent, cut to 100 bytes, for an error message.
func quote(s string) string {
	if len(s) > 100 {
		s = strings.ToValidUTF8(s[:100], "") + "..."
	}
	return strconv.Quote(s)
}
