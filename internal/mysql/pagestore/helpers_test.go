package pagestore_test

import (
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
