package exactlyonce

import (
	"strings"
	"testing"
)

func TestDecodeCounterMessage(t *testing.T) {
	good := map[string]CounterMessage{
		`{"entityId":"m1","entityType":"message","userId":"u","action":"added"}`:                         {"m1", "message", "u", CounterAdded},
		`{"action":"readed","userId":"u","entityType":"t","entityId":"e"}`:                               {"e", "t", "u", CounterRead},
		` {"entityId":"e","entityType":"t","userId":"u","action":"read"} `:                               {"e", "t", "u", CounterRead},
		`{"entityId":"` + strings.Repeat("é", 255) + `","entityType":"t","userId":"u","action":"added"}`: {strings.Repeat("é", 255), "t", "u", CounterAdded},
		// Escapes, a surrogate pair among them, read back as what they say; an entity id is no path
		// segment, so it may hold a slash or be a dot.
		`{"entityId":"\u00e9\ud83d\ude00","entityType":"t","userId":"u","action":"added"}`: {"é😀", "t", "u", CounterAdded},
		`{"entityId":"posts/1","entityType":"t","userId":"u","action":"added"}`:            {"posts/1", "t", "u", CounterAdded},
		`{"entityId":".","entityType":" t","userId":"u","action":"added"}`:                 {".", " t", "u", CounterAdded},
	}
	for body, want := range good {
		got, err := DecodeCounterMessage(body)
		if err != nil || got != want {
			t.Errorf("%.60s: got %+v, %v; want %+v", body, got, err, want)
		}
	}
	for body, wantErr := range map[string]string{
		`not json`: "not JSON",
		`[]`:       "not a JSON object",
		`{"entityId":"e","entityType":"t","userId":"u"}`:                                                 "action is missing",
		`{"entityId":"e","entityType":"t","userId":"u","action":"deleted"}`:                              `action must be "added" or "readed"`,
		`{"entityId":"e","entityType":"t","userId":"u","action":"ADDED"}`:                                `action must be`,
		`{"entityId":"","entityType":"t","userId":"u","action":"added"}`:                                 "entityId must be 1 to 255 characters, got 0",
		`{"entityId":"e","entityType":"t","userId":"` + strings.Repeat("x", 256) + `","action":"added"}`: "userId must be 1 to 255 characters, got 256",
		`{"entityId":"e","entityId":"f","entityType":"t","userId":"u","action":"added"}`:                 `field "entityId" given twice`,
		`{"entityId":"e","entityType":"t","userId":"u","action":"added","action":"readed"}`:              `field "action" given twice`,
		// What the database would not tell from another text, or what could not be read back.
		`{"entityId":"e","entityType":"t ","userId":"u","action":"added"}`:                    "entityType must not end with a space",
		`{"entityId":"e ","entityType":"t","userId":"u","action":"added"}`:                    "entityId must not end with a space",
		`{"entityId":"e","entityType":"t","userId":"u  ","action":"added"}`:                   "userId must not end with a space",
		"{\"entityId\":\"e\xff\",\"entityType\":\"t\",\"userId\":\"u\",\"action\":\"added\"}": "entityId must be valid UTF-8",
		`{"entityId":"e","entityType":"t\ud800","userId":"u","action":"added"}`:               "entityType must be valid UTF-8",
		`{"entityId":"e","entityType":"t","userId":"\udc00u","action":"added"}`:               "userId must be valid UTF-8",
		// The user id and the type are path segments of GET /counters/{userId}/{entityType}.
		`{"entityId":"e","entityType":"t","userId":"a/b","action":"added"}`:           `userId must not contain '/' or '\'`,
		`{"entityId":"e","entityType":"a\\b","userId":"u","action":"added"}`:          `entityType must not contain '/' or '\'`,
		`{"entityId":"e","entityType":"t","userId":"..","action":"added"}`:            `userId must not be "." or ".."`,
		`{"entityId":"e","entityType":".","userId":"u","action":"added"}`:             `entityType must not be "." or ".."`,
		`{"entityId":"e","entityType":"t\n","userId":"u","action":"added"}`:           "entityType must not contain control characters",
		`{"entityId":"e","entityType":"t","userId":"a\u0085b","action":"added"}`:      "userId must not contain control characters",
		`{"entityId":"e","entityType":"t\u007f","userId":"u","action":"added"}`:       "entityType must not contain control characters",
		`{"entityId":"e","EntityType":"t","userId":"u","action":"added"}`:             `unknown field "EntityType"`,
		`{"entityId":1,"entityType":"t","userId":"u","action":"added"}`:               "entityId must be a string",
		`{"entityId":"e","entityType":"t","userId":"u","action":"added","x":[1e400]}`: "x[0]: the number 1e400 is outside the range",
		`{"entityId":"e","entityType":"t","userId":"u","action":"added"}{}`:           "something follows",
		`{"entityId":"e","entityType":"t","userId":"u","action":"added","x":null}`:    `unknown field "x"`,
	} {
		if _, err := DecodeCounterMessage(body); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%.60s: got %v, want an error containing %q", body, err, wantErr)
		}
	}
}

// The entity hash separates its parts: ("ab", "c") and ("a", "bc") are different entities.
func TestEntityHashSeparatesItsParts(t *testing.T) {
	a := CounterMessage{EntityID: "x", EntityType: "ab", UserID: "c"}.EntityHash()
	b := CounterMessage{EntityID: "x", EntityType: "a", UserID: "bc"}.EntityHash()
	if a == b {
		t.Fatal("two different entities share a hash")
	}
}
