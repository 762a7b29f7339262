package browser_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql"
	"github.com/exactlyonce/exactlyonce/internal/wire"
)

// inOrder is the JavaScript that tells whether the characters of the element elem (a JavaScript
// expression) are laid out left to right in their order (each one's box starts right of the one
// before), and that its text holds no invisible or formatting character: what makes two different
// names look alike.
func inOrder(elem string) string {
	return fmt.Sprintf(`(() => {
		const n = %s;
		if (!n) return 'missing';
		if (/[\p{Cf}\p{Cc}\p{Zl}\p{Zp}]/u.test(n.textContent)) return 'an invisible character in ' + JSON.stringify(n.textContent);
		const w = document.createTreeWalker(n, NodeFilter.SHOW_TEXT);
		let last = -Infinity, seen = '';
		for (let t = w.nextNode(); t; t = w.nextNode()) {
			for (let i = 0; i < t.data.length; i++) {
				const r = document.createRange();
				r.setStart(t, i); r.setEnd(t, i + 1);
				const x = r.getBoundingClientRect().left;
				if (x <= last) return 'out of order at ' + JSON.stringify(seen + t.data[i]);
				last = x; seen += t.data[i];
			}
		}
		return 'ok';
	})()`, elem)
}

// refField is the JavaScript of the event page's referenceId field.
const refField = `[...document.querySelectorAll('#event-fields dt')].find((d) => d.textContent === 'referenceId').nextElementSibling`

func q(sel string) string { return fmt.Sprintf("document.querySelector(%q)", sel) }

// A name stored before the API refused invisible characters, "order-\u202E24" (a right-to-left
// override), showed in the console as "order-42": the page put the name in as text, and the
// browser applied the override. The console now shows each name left to right in its characters'
// order, isolated from the text around it, with every character that shows nothing of itself
// written as its code point and marked: on the task's page, its reference's page and link, and in
// the confirmation of a reference's retry. A right-to-left name, "1א" beside "א1", is shown in its
// characters' order too, so the two do not look alike.
func TestNamesAreShownUnambiguously(t *testing.T) {
	s := startSystem(t)
	b := browser(t)
	store, err := wire.StoresOn(s.db, mysql.Config{})
	require.NoError(t, err)
	const stored = "order-\u202E24"
	created, err := store.Tasks.CreateTasks(context.Background(), []exactlyonce.NewTask{{URL: s.hook, ReferenceID: stored, Payload: []byte(`"bad"`), MaxRetries: 0}})
	require.NoError(t, err)
	id := created[0].ID
	rtl := s.post(t, "/events/async", task(s.hook, "1\u05d0", `{}`))

	run(t, b, "open the console", chromedp.Navigate(s.url+"/ui/"), until(`/^\d+$/.test(`+text("#count-total")+`)`))
	run(t, b, "open the task stored with an override", show(fmt.Sprintf("#/events/%d", id)),
		until(text("#event-fields")+`.includes('order-')`), until(`!!document.querySelector('#reference-around caption')`))
	for what, elem := range map[string]string{
		"the referenceId field": refField,
		"the reference's table": q("#reference-around caption"),
		"the reference's link":  q("#event-body p a[href^='#/references/']"),
	} {
		require.Equal(t, "ok", value(t, b, what, chromedp.Evaluate[string](inOrder(elem))), what)
		require.Contains(t, value(t, b, what, chromedp.Evaluate[string](elem+".textContent")), `order-\u{202E}24`, what)
	}
	require.Equal(t, "U+202E, a character that shows nothing of itself",
		value(t, b, "the mark's title", chromedp.Evaluate[string](`document.querySelector('#event-fields .unseen').title`)))

	run(t, b, "open its reference", show("#/references/"+strings.ReplaceAll(encodeURIComponent(stored), "'", "%27")),
		until(`!!document.querySelector('#reference-table tbody a')`))
	require.Equal(t, "ok", value(t, b, "h1", chromedp.Evaluate[string](inOrder(q("#main h1")))))
	require.Equal(t, `Reference order-\u{202E}24`, value(t, b, "h1", chromedp.Evaluate[string](text("#main h1"))))
	accessible(t, b, "a reference whose name holds an override")

	run(t, b, "open the right-to-left name's task", show(fmt.Sprintf("#/events/%d", rtl)),
		until(text("#event-fields")+`.includes('\u05d0')`))
	require.Equal(t, "ok", value(t, b, "1א", chromedp.Evaluate[string](inOrder(refField))))
}

// encodeURIComponent is JavaScript's, for a name in a hash route.
func encodeURIComponent(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
