package exactlyonce

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A number past float64's range, anywhere in a body, is refused with an EINVALID error naming its
// place: Go's decoder into float64 or any cannot read it back, and JavaScript makes it Infinity.
// What reads back (if rounded, or as 0) is taken.
func TestDecodeObjectRefusesNumbersPastFloat64(t *testing.T) {
	t.Parallel()
	long := "1" + strings.Repeat("0", 399)
	for body, place := range map[string]string{
		`{"n": 1e400}`:                                  "n: the number 1e400 ",
		`{"n": -1e400}`:                                 "n: the number -1e400 ",
		`{"n": 1.7976931348623159e308}`:                 "n: the number 1.7976931348623159e308 ",
		`{"payload": {"a": [1, {"b": 2E+999}]}}`:        "payload.a[1].b: the number 2E+999 ",
		`{"payload": [[0], [1, 2, -9e9999]]}`:           "payload[1][2]: ",
		`{"payload": {"odd key": {"": 1e309}}}`:         `payload["odd key"][""]: `,
		`{"payload": {"x": {}, "y": [], "z": [1e400]}}`: "payload.z[0]: ",
		`{"p": "1e400", "q": ` + long + `}`:             "q: the number 10000000000000000000...0000000000 (400 characters) ",
	} {
		_, err := DecodeObject([]byte(body))
		var e *Error
		require.True(t, errors.As(err, &e), "%.60s: %v", body, err)
		require.Equal(t, EINVALID, e.Code)
		require.True(t, strings.HasPrefix(e.Message, place), "%.60s: %s", body, e.Message)
		require.Contains(t, e.Message, "outside the range of a 64-bit float")
	}
	for _, body := range []string{
		`{"n": 1.7976931348623157e308, "m": -1.7976931348623157e308}`,
		`{"n": 1e-400, "m": 4.9e-324}`, // too small to tell from 0: reads back as 0
		`{"n": 123456789012345678901234567890}`,
		`{"s": "1e400", "t": "\"1e400", "u": ["\\", 1e300]}`,
	} {
		_, err := DecodeObject([]byte(body))
		require.NoError(t, err, body)
	}
}

// A name given twice in one object, at any depth of a body's values, is refused with an EINVALID
// error naming its place: readers disagree on which value they read. Names are compared as read
// ("\u0061" is "a"); the same name in two objects, or as a string value, is no duplicate.
func TestDecodeObjectRefusesANameGivenTwiceInANestedObject(t *testing.T) {
	t.Parallel()
	for body, place := range map[string]string{
		`{"payload": {"a": 1, "a": 2}}`:                             "payload.a: the name is given twice",
		`{"payload": {"a": 1, "\u0061": 2}}`:                        "payload.a: the name is given twice",
		`{"payload": [0, {"o": {"x": [], "y": {}, "x": 3}}]}`:       "payload[1].o.x: the name is given twice",
		`{"payload": {"odd key": 1, "b": "odd key", "odd key": 2}}`: `payload["odd key"]: the name is given twice`,
		`{"payload": {"": 1, "": 1}}`:                               `payload[""]: the name is given twice`,
		`{"payload": {"q\"": 1, "q\u0022": 1}}`:                     `payload["q\""]: the name is given twice`,
	} {
		_, err := DecodeObject([]byte(body))
		var e *Error
		require.True(t, errors.As(err, &e), "%s: %v", body, err)
		require.Equal(t, EINVALID, e.Code)
		require.True(t, strings.HasPrefix(e.Message, place), "%s: %s", body, e.Message)
	}
	for _, body := range []string{
		`{"payload": {"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]}}`,
		`{"payload": {"a": "a", "b": "\"a\", \"a\""}}`,
		`{"payload": {"a": 1, "A": 2, "\u00e9": 3, "e\u0301": 4}}`, // other names (no normalisation)
		`{"payload": [{"x": 1}, {"x": 1}]}`,
	} {
		_, err := DecodeObject([]byte(body))
		require.NoError(t, err, body)
	}
}
