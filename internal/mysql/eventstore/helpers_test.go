package eventstore_test

import (
	"crypto/sha256"
	"fmt"

	"github.com/exactlyonce/exactlyonce"
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

// keyed is a keyed create of key (no scope's), with the answer it stores.
func keyed(scope, key string, pending bool, body string) exactlyonce.KeyedCreate {
	return exactlyonce.KeyedCreate{Key: exactlyonce.KeyHash(scope, key), Fingerprint: sha256.Sum256([]byte(body)), Pending: pending, Value: "v-" + key,
		Answer: func(id int64) (int, []byte) { return 201, fmt.Appendf(nil, `{"id":%d,"key":%q}`, id, key) }}
}
