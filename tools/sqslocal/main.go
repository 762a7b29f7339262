// Command sqslocal serves the SQS JSON protocol on a loopback address, for running and testing the
// system without AWS or Docker. It is goaws (github.com/Admiral-Piett/goaws) used as a library, so
// that it listens on 127.0.0.1 only (goaws's own command binds every interface) and takes its
// address from a flag. It lives in its own Go module so goaws's dependencies stay out of the
// application's. Requests pass through a gate (gate.go) that keeps goaws's unlocked reads of its
// queue map away from the actions that write it, which otherwise crash the process.
//
//	sqslocal -addr 127.0.0.1:4100 [-ignore-interrupt]
//
// Queues are created by clients (CreateQueue); all state is in memory and gone when it exits.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/models"
	"github.com/Admiral-Piett/goaws/app/router"
	log "github.com/sirupsen/logrus"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4100", "loopback address to listen on")
	account := flag.String("account", "000000000000", "account id named in queue URLs and ARNs")
	verbose := flag.Bool("v", false, "log every request")
	ignoreInterrupt := flag.Bool("ignore-interrupt", false, "stop on SIGTERM only: scripts/run.sh stops it after "+
		"the runner has deleted its last messages, so a terminal's Ctrl-C (SIGINT to the whole process group) must not stop it first")
	flag.Parse()

	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sqslocal: -addr: %v\n", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sqslocal: %v\n", err)
		os.Exit(1)
	}
	port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port) // -addr may say port 0

	log.SetOutput(os.Stderr)
	log.SetLevel(log.ErrorLevel) // goaws warns on every empty receive
	if *verbose {
		log.SetLevel(log.DebugLevel)
	}
	models.CurrentEnvironment = models.Environment{
		Host: host,
		Port: port,
		// Empty: goaws would otherwise put the region in front of the host in queue URLs
		// (http://us-east-1.127.0.0.1:4100/...), which does not resolve. ARNs then have no region.
		Region:    "",
		AccountID: *account,
		QueueAttributeDefaults: models.EnvQueueAttributes{
			VisibilityTimeout:  30,
			MaximumMessageSize: 262144,
		},
	}

	quit := make(chan bool)
	// goaws returns invisible messages to the queue and moves them to a DLQ on this tick.
	go gosqs.PeriodicTasks(100*time.Millisecond, quit)

	// The timeouts of the main module's servers (internal/httpserver, which this module cannot
	// import): an idle keep-alive connection is closed after a minute.
	srv := &http.Server{Handler: newGate(router.New()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		if *ignoreInterrupt {
			signal.Ignore(syscall.SIGINT)
			signal.Notify(sig, syscall.SIGTERM)
		} else {
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		}
		<-sig
		_ = srv.Close()
	}()
	// The first line of output tells a parent process where to connect.
	fmt.Printf("sqslocal listening on http://%s:%s\n", host, port)
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintf(os.Stderr, "sqslocal: %v\n", err)
		os.Exit(1)
	}
}
