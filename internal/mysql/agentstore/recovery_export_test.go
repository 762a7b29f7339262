package agentstore

import "reflect"

// RecoveryQueryText is the statement name of recovery.sql; it panics for a name it does not have.
func RecoveryQueryText(name string) string {
	f := reflect.ValueOf(recoveryQueries).FieldByName(name)
	if !f.IsValid() {
		panic("no statement named " + name)
	}
	return f.String()
}
