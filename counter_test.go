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
		`{"entityId":"e","entityId":"f","entityType":"t","userId":"u","action":"added"}`:                 `member "entityId" twice`,
		`{"entityId":"e","EntityType":"t","userId":"u","action":"added"}`:                                `unknown member "EntityType"`,
		`{"entityId":1,"entityType":"t","userId":"u","action":"added"}`:                                  "entityId must be a string",
		`{"entityId":"e","entityType":"t","userId":"u","action":"added"}{}`:                              "something follows",
		`{"entityId":"e","entityType":"t","userId":"u","action":"added","x":null}`:                       `unknown member "x"`,
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
