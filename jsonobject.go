package exactlyonce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// One rule for every body (the API's requests, the counter messages): a body is one JSON object,
// each field given once, read by DecodeObject; a string field is read by DecodeString, which refuses
// what would not read back as it was sent.

// NotObjectError says why a body is not one JSON object: Syntax when it is not JSON at all (Offset
// is then the byte where reading it failed), TooDeep when it nests more than MaxJSONDepth values
// (valid JSON that no body needs; encoding/json stops there), Trailing when one JSON object is
// followed by more.
type NotObjectError struct {
	Reason   string
	Syntax   bool
	TooDeep  bool
	Offset   int64
	Trailing bool
}

// MaxJSONDepth is how deep encoding/json reads nested values, and so a body.
const MaxJSONDepth = 10000

func (e *NotObjectError) Error() string { return e.Reason }

// DecodeObject reads a body that must be one JSON object and nothing else (JSON whitespace around
// it aside), and returns its fields' raw values by name, for the caller to match exactly (unlike
// encoding/json's struct fields, which match a name in any case). A field given twice is refused
// with an EINVALID *Error naming it, which is safe to show a caller: encoding/json would let the
// last one win, so a body that says two things would be read as one of them. A body that is not
// one JSON object is a *NotObjectError.
func DecodeObject(body []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	notJSON := func(err error) error {
		offset := dec.InputOffset()
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax) && strings.Contains(syntax.Error(), "exceeded max depth"):
			return &NotObjectError{Reason: "nested too deep", TooDeep: true, Offset: syntax.Offset}
		case errors.As(err, &syntax):
			offset = syntax.Offset
		case errors.Is(err, io.ErrUnexpectedEOF): // cut short: it breaks where it ends
			offset = int64(len(body))
		}
		return &NotObjectError{Reason: "not JSON: " + err.Error(), Syntax: true, Offset: offset}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, notJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &NotObjectError{Reason: "not a JSON object"}
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notJSON(err)
		}
		name, _ := tok.(string) // inside an object, the decoder gives a name or an error
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, notJSON(err)
		}
		if _, twice := fields[name]; twice {
			return nil, Errorf(EINVALID, "field %q given twice: give each field once", boundText(name))
		}
		if err := checkValue(name, v); err != nil {
			return nil, err
		}
		fields[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace: More said no field follows
		return nil, notJSON(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &NotObjectError{Reason: "something follows the JSON object", Trailing: true}
	}
	return fields, nil
}

// checkValue refuses a JSON value (valid JSON, the raw value of field) that holds a number whose
// magnitude is past float64's range (about 1.8e308): 1e400, -1e400, an integer of 400 digits. JSON's
// grammar allows them, but RFC 7493 (I-JSON) says not to send them, and most readers cannot read
// them back: Go's encoding/json into float64 or any fails, JavaScript's JSON.parse makes them
// Infinity, which JSON.stringify writes as null. Stored, such a payload would break every answer
// that shows it, and every receiver of its webhook, for good. A number too small to tell from 0
// (1e-400) reads back as 0 everywhere, and a long integer past 2^53 reads back rounded, as RFC
// 7493 warns; both are taken as sent. The error is EINVALID and names the number's place:
// payload.items[2].n.
//
// It also refuses a name given twice in one object at any depth ({"a": 1, "a": 2}, or "a" and
// "\u0061"), as DecodeObject does a body's fields: RFC 7493 (I-JSON) says names must be unique,
// and readers disagree on which value they read (Go's and JavaScript's the last, others the first
// or an error), so a payload stored and delivered byte for byte would say different things to
// different receivers. The error names the place of the second: payload.order.id.
func checkValue(field string, raw json.RawMessage) error {
	if !outOfRange(raw) && !duplicateName(raw) { // the common case, without building a path
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type level struct {
		object bool
		key    string          // an object's current key
		seen   map[string]bool // an object's keys so far
		index  int             // an array's next index
	}
	var stack []level
	place := func() string {
		var b strings.Builder
		b.WriteString(boundText(field))
		for _, l := range stack {
			switch {
			case !l.object:
				fmt.Fprintf(&b, "[%d]", l.index-1)
			case plainKey(l.key):
				b.WriteString("." + boundText(l.key))
			default:
				fmt.Fprintf(&b, "[%q]", boundText(l.key))
			}
		}
		return b.String()
	}
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF: raw was read whole (outOfRange found the number outside a string)
		}
		if expectKey { // inside an object, a key or its closing brace
			if k, ok := tok.(string); ok {
				top := &stack[len(stack)-1]
				top.key = k
				if top.seen[k] {
					return Errorf(EINVALID, "%s: the name is given twice in one object, and JSON readers disagree on which value "+
						"they read (RFC 7493, I-JSON): give each name once", place())
				}
				top.seen[k] = true
				expectKey = false
				continue
			}
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			expectKey = len(stack) > 0 && stack[len(stack)-1].object
			continue
		}
		// a value: counted in its array, its key used in its object
		if len(stack) > 0 && !stack[len(stack)-1].object {
			stack[len(stack)-1].index++
		}
		switch v := tok.(type) {
		case json.Delim:
			l := level{object: v == '{'}
			if l.object {
				l.seen = map[string]bool{}
			}
			stack = append(stack, l)
			expectKey = v == '{'
			continue
		case json.Number:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				n := string(v)
				if len(n) > 40 {
					n = n[:20] + "..." + n[len(n)-10:] + " (" + strconv.Itoa(len(n)) + " characters)"
				}
				return Errorf(EINVALID, "%s: the number %s is outside the range of a 64-bit float (at most about 1.8e308 either way), "+
					"which most JSON readers cannot read back (RFC 7493, I-JSON)", place(), n)
			}
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1].object
	}
}

// outsideStrings calls f with the index of each byte of the JSON text raw (valid JSON) that is
// outside its strings (their quotes and contents skipped); f returns the index to go on from (i+1
// for the next byte), so that it can take a token of several bytes at once.
func outsideStrings(raw []byte, f func(i int) int) {
	inString, escaped := false, false
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		default:
			i = f(i)
			continue
		}
		i++
	}
}

// outOfRange tells whether the JSON text raw (valid JSON) holds a number, outside its strings, that
// strconv.ParseFloat cannot hold.
func outOfRange(raw []byte) bool {
	out := false
	outsideStrings(raw, func(i int) int {
		if c := raw[i]; out || !(c == '-' || ('0' <= c && c <= '9')) {
			return i + 1
		}
		j := i + 1
		for j < len(raw) && strings.IndexByte("0123456789.eE+-", raw[j]) >= 0 {
			j++
		}
		if _, err := strconv.ParseFloat(string(raw[i:j]), 64); err != nil {
			out = true
		}
		return j
	})
	return out
}

// duplicateName tells whether the JSON text raw (valid JSON) has an object, at any depth, that
// gives one name twice. Names are compared as read: an escaped name is decoded first ("\u0061"
// is "a").
func duplicateName(raw []byte) bool {
	type level struct {
		object bool
		seen   map[string]struct{}
	}
	var stack []level
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			j, escaped := i+1, false
			for ; j < len(raw) && raw[j] != '"'; j++ {
				if raw[j] == '\\' {
					escaped = true
					j++
				}
			}
			if expectKey {
				top := &stack[len(stack)-1]
				name := string(raw[i : j+1])
				if escaped {
					var s string
					if json.Unmarshal(raw[i:j+1], &s) == nil {
						name = `"` + s + `"`
					}
				}
				if top.seen == nil {
					top.seen = map[string]struct{}{}
				}
				if _, twice := top.seen[name]; twice {
					return true
				}
				top.seen[name] = struct{}{}
				expectKey = false
			}
			i = j
		case '{', '[':
			stack = append(stack, level{object: c == '{'})
			expectKey = c == '{'
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			expectKey = stack[len(stack)-1].object
		}
	}
	return false
}

// JSONDepth returns how deep the JSON text raw (valid JSON) nests arrays and objects: 0 for a
// scalar, 1 for [] or {"a": 1}. Brackets inside strings do not count.
func JSONDepth(raw []byte) int {
	depth, most := 0, 0
	outsideStrings(raw, func(i int) int {
		switch raw[i] {
		case '[', '{':
			depth++
			most = max(most, depth)
		case ']', '}':
			depth--
		}
		return i + 1
	})
	return most
}

// plainKey tells whether an object's key can follow a dot in a place (checkValue): letters,
// digits, _ and -, not empty.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// DecodeString reads a field's raw value (from DecodeObject) as a string. encoding/json replaces
// invalid UTF-8 and lone surrogate escapes ("\ud800") with U+FFFD, so that what is stored would
// not be what was sent: both are refused instead. The errors are EINVALID, name field and are safe
// to show a caller.
func DecodeString(field string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", Errorf(EINVALID, "%s must be a string", field)
	}
	if !utf8.Valid(raw) || loneSurrogate(raw) {
		return "", Errorf(EINVALID, "%s must be valid UTF-8", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", Errorf(EINVALID, "%s must be a string", field)
	}
	return s, nil
}

// LoneSurrogate tells whether a JSON value (valid JSON) holds, in any of its strings, a \u escape
// of a UTF-16 surrogate that is not half of a pair ("\ud800"): no character (RFC 7493, I-JSON,
// says not to send one), which Go's encoding/json reads as U+FFFD, without a word.
func LoneSurrogate(raw []byte) bool { return loneSurrogate(raw) }

// loneSurrogate tells whether a JSON string (valid JSON) holds a \u escape of a UTF-16 surrogate
// that is not a high one followed by an escaped low one.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue // \" \\ \/ \b \f \n \r \t: one character, skipped
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			return true
		}
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xdc00 || i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
			return true // a low surrogate first, or a high one not followed by an escape
		}
		low, ok := hex4(raw[i+3:])
		if !ok || low < 0xdc00 || low > 0xdfff {
			return true
		}
		i += 6
	}
	return false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
