package rie

import (
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// listensOn tells the emulator's listener from another process's, and from none: how Start knows
// that what answered on the invoke port is the emulator and not whoever took the port first.
func TestListensOnTellsWhoseListenerItIs(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc here: listensOn knows nothing, and Start trusts the connection")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	owned, known := listensOn(os.Getpid(), port)
	require.True(t, known)
	require.True(t, owned, "this process listens there")
	owned, known = listensOn(os.Getppid(), port)
	require.True(t, known)
	require.False(t, owned, "the parent does not")

	require.NoError(t, ln.Close())
	owned, known = listensOn(os.Getpid(), port)
	require.True(t, known)
	require.False(t, owned, "nobody listens there now")
}
