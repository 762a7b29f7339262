package browser_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A payload's numbers are shown as they were written, as the API stores and answers them byte for
// byte: the page read every answer with JSON.parse and showed the numbers it made, so
// 12345678901234567890 (past 2^53, which a payload may hold: only numbers past float64 are refused)
// read 12345678901234567000, and 1.0, 1e2 and -0 read 1, 100 and 0: an operator comparing a
// payload with the producer's saw other numbers than were sent.
func TestPayloadNumbersShownAsWritten(t *testing.T) {
	s := startSystem(t)
	b := browser(t)
	inObject := s.post(t, "/events/async", task(s.hook, "ref-numbers", `{"big":12345678901234567890,"one":1.0,"e":1e2,"neg":-0,"small":7,"list":[9007199254740993,2.50]}`))
	bare := s.post(t, "/events/async", task(s.hook, "ref-numbers-bare", `12345678901234567890`))
	run(t, b, "open the console", chromedp.Navigate(s.url+"/ui/"), until(`/^\d+$/.test(`+text("#count-total")+`)`))
	run(t, b, "open the task with numbers", show(fmt.Sprintf("#/events/%d", inObject)),
		until(text("#event-fields")+`.includes('"big"')`))
	shown := value(t, b, "the payload", chromedp.Evaluate[string](text("#event-fields pre")))
	for _, want := range []string{`"big": 12345678901234567890`, `"one": 1.0`, `"e": 1e2`, `"neg": -0`, `"small": 7`, `9007199254740993`, `2.50`} {
		require.Contains(t, shown, want, "the payload as the page shows it")
	}
	run(t, b, "open the task with a bare number", show(fmt.Sprintf("#/events/%d", bare)),
		until(text("#event-fields")+`.includes('ref-numbers-bare')`))
	fields := value(t, b, "the fields", chromedp.Evaluate[string](text("#event-fields")))
	require.Contains(t, fields, "12345678901234567890")
	require.Contains(t, fields, fmt.Sprintf("id%d", bare), "the id, a number, is shown as one")
}
