package exactlyonce

import (
	"fmt"
	"strings"
	"testing"
)

// invisibles are characters that show nothing of themselves, so that two names differing by one
// look alike on a screen, and the bidi controls among them also reorder what follows them: a
// console could show "order-\u202E24" as "order-42". Each is refused in a name a caller gives
// (CheckNewName), at any place in it.
var invisibles = []rune{
	0x202A, 0x202B, 0x202C, 0x202D, 0x202E, // bidi embeddings, pop, overrides
	0x2066, 0x2067, 0x2068, 0x2069, // bidi isolates
	0x200E, 0x200F, 0x061C, // bidi marks
	0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, // zero-width space, joiners, word joiner, BOM
	0x00AD, 0x180E, 0x2061, 0x2064, 0xFFF9, 0xFFFB, 0xE0001, 0xE0041, 0xE007F, // soft hyphen, invisible operators, annotations, tags
	0x2028, 0x2029, // line and paragraph separators
	0x034F, 0x115F, 0x1160, 0x17B4, 0x3164, 0xFFA0, 0x2065, 0xE0000, // Unicode's other default-ignorable code points
}

func TestNewNamesRefuseInvisibleCharacters(t *testing.T) {
	for _, r := range invisibles {
		for _, name := range []string{string(r) + "ref", "ref" + string(r) + "42", "ref" + string(r)} {
			err := CheckNewName("referenceId", name)
			if err == nil {
				t.Errorf("%q (U+%04X) is accepted", name, r)
				continue
			}
			msg := ErrorMessage(err)
			want := fmt.Sprintf("U+%04X", r)
			if !strings.HasPrefix(msg, "referenceId ") || !strings.Contains(msg, want) {
				t.Errorf("%q: the message %q does not name the field and %s", name, msg, want)
			}
			if strings.ContainsRune(msg, r) {
				t.Errorf("%q: the message %q carries the character itself", name, msg)
			}
			if CheckPathName("referenceId", name) != nil {
				t.Errorf("%q: a read's check (CheckPathName) refuses it: a name stored before the rule could not be read back", name)
			}
		}
	}
	// What is visible stays a name: letters of any script, marks, emoji, a no-break space inside,
	// the variation selector of an emoji's presentation.
	for _, ok := range []string{"order-42", "é😀", "r\u00a0s", "עברית-1", "مرحبا", "e\u0301", "❤\ufe0f", "日本語", "a b"} {
		if err := CheckNewName("referenceId", ok); err != nil {
			t.Errorf("%q is refused: %v", ok, err)
		}
	}
	// CheckPathName's rules come first, with their own messages.
	if err := CheckNewName("userId", "a/b"); err == nil || !strings.Contains(err.Error(), "must not contain '/'") {
		t.Errorf("a/b: %v", err)
	}
}

// A counter message's userId and entityType are names a producer gives: an invisible character in
// either fails the message (it ends in the dead-letter queue, alone), as GET /counters/{userId}
// would show two users alike.
func TestCounterMessagesRefuseInvisibleCharacters(t *testing.T) {
	for _, field := range []string{"userId", "entityType"} {
		for _, r := range []rune{0x202E, 0x2066, 0x200B, 0xFEFF} {
			m := map[string]string{"entityId": "e", "entityType": "t", "userId": "u", "action": "added"}
			m[field] = "x" + string(r) + "y"
			body := fmt.Sprintf(`{"entityId":%q,"entityType":%q,"userId":%q,"action":%q}`, m["entityId"], m["entityType"], m["userId"], m["action"])
			if _, err := DecodeCounterMessage(body); err == nil || !strings.Contains(err.Error(), field+" must not contain") {
				t.Errorf("%s with U+%04X: %v", field, r, err)
			}
		}
	}
}
