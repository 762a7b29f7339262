// Package fault gives tests and the chaos run the failures they inject into the database: a private
// MariaDB server (server.go) that can be stopped, killed and started again without touching the
// shared server every other test uses, and a TCP proxy (proxy.go) in front of a server that cuts
// connections, refuses new ones, or lets a COMMIT through and loses its reply.
package fault
