package exactlyonce

import (
	"math/rand/v2"
	"strconv"
)

var (
	adjectives = []string{"amber", "brisk", "calm", "dusky", "eager", "fallow", "gentle", "hazy", "ivory", "jolly",
		"keen", "lucid", "mellow", "nimble", "opal", "placid", "quiet", "rustic", "sable", "tawny", "umber", "vivid",
		"wistful", "young", "zesty"}
	nouns = []string{"anchor", "badger", "cedar", "delta", "ember", "falcon", "glade", "harbor", "island", "juniper",
		"kestrel", "lagoon", "meadow", "nebula", "orchid", "pebble", "quarry", "river", "summit", "thicket", "upland",
		"valley", "willow", "yarrow", "zephyr"}
)

// NewValue generates the value an event gets when it is processed: a readable word pair and a number.
// Processing is deliberately cheap; the system's subject is delivering it exactly once.
func NewValue() string {
	return adjectives[rand.IntN(len(adjectives))] + "-" + nouns[rand.IntN(len(nouns))] + "-" +
		strconv.Itoa(rand.IntN(10000))
}
