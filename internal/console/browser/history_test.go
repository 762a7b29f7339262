package browser_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/console"
	"github.com/exactlyonce/exactlyonce/internal/httpserver"
)

// The console's overview against an API that answers as a stack with an archive would,
// and against one that does not know GET /history (a stack deployed before it): the archive's
// events and page objects are shown; without the route, the section says it is unavailable and the
// rest of the overview works. The stand-in answers only what the overview asks.
func TestHistoryTiersWithAnArchiveOrWithout(t *testing.T) {
	for _, c := range []struct {
		name    string
		history string // GET /history's answer; "" for a 404
		check   func(t *testing.T, b context.Context)
	}{
		{"archive", `{"time":"2026-11-27T12:00:00Z","total":30007,"events":{"rows":7},"pages":{"events":10000,"rows":1,"rowsEstimated":true},` +
			`"archive":{"pages":2,"events":20000}}`, func(t *testing.T, b context.Context) {
			run(t, b, "the archive's tier", until(text("#tier-archive")+` === '20,000' && `+text("#tier-archive-held")+` === '2 page objects'`))
			require.Equal(t, "10,000", textOf(t, b, "#tier-pages"))
			require.Equal(t, "about 1 page row", textOf(t, b, "#tier-pages-held"))
			require.Equal(t, "Where the 30,007 events are", textOf(t, b, "#history-tiers caption"))
			shot(t, b, "overview-history-archive")
			accessible(t, b, "overview with an archive")
		}},
		{"no route", "", func(t *testing.T, b context.Context) {
			run(t, b, "the section says why it is empty", until(text("#history-unavailable")+`.startsWith('The history by tier is unavailable')`))
			require.Equal(t, "7", textOf(t, b, "#count-total"), "the rest of the overview is drawn")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := http.NewServeMux()
			api.HandleFunc("GET /overview", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"time":"2026-11-27T12:00:00Z","events":{"pending":0,"processing":0,"queued":0,"processed":7,"failed":0,"total":7},` +
					`"waiting":0,"oldestWaitingSeconds":null}`))
			})
			if c.history != "" {
				api.HandleFunc("GET /history", func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(c.history))
				})
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			h, err := console.New(console.Options{API: api, Addr: ln.Addr().String()})
			require.NoError(t, err)
			srv := httpserver.New(h)
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			b := browser(t)
			run(t, b, "open the overview", chromedp.Navigate("http://"+ln.Addr().String()+"/ui/"), until(text("#count-total")+` === '7'`))
			c.check(t, b)
		})
	}
}

// textOf is an element's text on the page.
func textOf(t *testing.T, b context.Context, sel string) string {
	t.Helper()
	return value(t, b, sel, chromedp.Evaluate[string](text(sel)))
}
