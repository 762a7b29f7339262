package mysql_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce"
	"github.com/exactlyonce/exactlyonce/internal/mysql/keystore"
	"github.com/exactlyonce/exactlyonce/internal/mysql/mysqltest"
)

// The stores' tests share these helpers (mysqltest/process.go).
var (
	fixedValue = mysqltest.FixedValue
	fixedWorks = mysqltest.FixedWorks
	processIDs = mysqltest.ProcessIDs
	processDue = mysqltest.ProcessDue
	together   = mysqltest.Together
)

// keyed is a keyed create of key in scope, answered with its id and key.
func keyed(scope, key string, pending bool, body string) exactlyonce.KeyedCreate {
	return exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash(scope, key), Fingerprint: sha256.Sum256([]byte(body)), Pending: pending, Value: "v-" + key,
		Answer: func(id int64) (int, []byte) { return 201, fmt.Appendf(nil, `{"id":%d,"key":%q}`, id, key) }}
}

// keyOpts are the options of a create that must succeed: its Wait bounds taking a connection and
// the buckets' locks, which a database stalled by a parallel suite can take seconds to grant.
var keyOpts = exactlyonce.KeyOptions{TTL: time.Hour, Wait: 30 * time.Second}

// bucketOf is the idempotency bucket of key in the default scope.
func bucketOf(key string) int64 {
	h := exactlyonce.KeyHash("", key)
	return int64(binary.BigEndian.Uint32(h[:4]) % keystore.KeyBuckets)
}
