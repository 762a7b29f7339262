package exactlyonce

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
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
