package exactlyonce

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names are the texts a caller names things by: a task's referenceId, a counter message's userId,
// entityType and entityId. Go keys them byte for byte (maps, the routing and entity hashes), and the
// store's statements compare them byte for byte too (CAST(... AS BINARY), internal/mysql/sql): the
// columns' collation, utf8mb4_bin, would ignore trailing spaces ("t" and "t " are equal to it: it is
// a PAD SPACE collation), and there is no NO PAD one that both MySQL 8 and MariaDB know. A name is
// also refused at the door when the two sides could disagree on it or when it could not be read back:
// CheckName and CheckPathName.

// MaxNameLength is the longest name, in characters (the columns are VARCHAR(255)).
const MaxNameLength = 255

// CheckName checks a name: valid UTF-8 of 1 to MaxNameLength characters that does not end with a
// space (which the columns' collation ignores, so that the database would take it for the same
// name without). The error is EINVALID, names field and is safe to show a caller.
func CheckName(field, s string) error {
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s must be valid UTF-8", field)
	}
	if n := utf8.RuneCountInString(s); n < 1 || n > MaxNameLength {
		return Errorf(EINVALID, "%s must be 1 to %d characters, got %d", field, MaxNameLength, n)
	}
	if strings.HasSuffix(s, " ") {
		return Errorf(EINVALID, "%s must not end with a space: the database would take it for the same name without one", field)
	}
	return nil
}

// CheckPathName checks a name that is also a segment of a URL path, such as GET
// /references/{referenceId}/events: CheckName's rules, and nothing that a client, a proxy or the
// server would split, clean away or turn into another path, so that the thing named can be read
// back: no control character, no '/' or '\' (browsers take both for a separator), and not "." or
// ".." (dot segments, which browsers remove even when written %2E%2E).
func CheckPathName(field, s string) error {
	if err := CheckName(field, s); err != nil {
		return err
	}
	switch {
	case s == "." || s == "..":
		return Errorf(EINVALID, "%s must not be \".\" or \"..\": a URL path cannot carry it", field)
	case strings.ContainsAny(s, `/\`):
		return Errorf(EINVALID, "%s must not contain '/' or '\\': it is a segment of a URL path", field)
	case HasControl(s):
		return Errorf(EINVALID, "%s must not contain control characters", field)
	}
	return nil
}

// HasControl tells whether s holds a control character: C0, DEL or C1 (U+0080-U+009F), which a
// name that is a URL path segment must not (CheckPathName; the console's proxy applies the same
// rule to the paths it forwards).
func HasControl(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }

// CheckNewName checks a name a caller gives to what it creates (a task's referenceId, a counter
// message's userId and entityType): CheckPathName's rules, and no invisible character (Invisible),
// which would let two different names look alike wherever they are shown (the console, a log, a
// terminal), "order-\u202E24" as "order-42". Only the writes check this: a read or a retry by name
// takes CheckPathName's rules, so that a name stored before this rule is still read back.
func CheckNewName(field, s string) error {
	if err := CheckPathName(field, s); err != nil {
		return err
	}
	if i := strings.IndexFunc(s, Invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return Errorf(EINVALID, "%s must not contain invisible or formatting characters (U+%04X at character %d): "+
			"two names that differ by one look alike", field, r, utf8.RuneCountInString(s[:i])+1)
	}
	return nil
}

// Invisible tells whether r shows nothing of itself: a format character (Unicode's Cf: the bidi
// marks, embeddings, overrides and isolates U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069,
// which also reorder the text around them; the zero-width space and joiners U+200B-U+200D, the word
// joiner U+2060, the BOM U+FEFF, the soft hyphen U+00AD, the tags U+E0001-U+E007F), a line or
// paragraph separator (U+2028, U+2029), or one of Unicode's other default-ignorable code points
// (U+034F, U+115F, U+1160, U+17B4, U+17B5, U+3164, U+FFA0, ...). The console marks the same
// characters in what it shows (app.js, shownName), names stored before CheckNewName included.
// Letters, marks, emoji, their variation selectors and spaces other than U+0020 are visible.
func Invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point)
}
