// Command s3local serves the S3 REST protocol on a loopback address, for running and testing the
// system without AWS or Docker, as tools/sqslocal serves SQS. It is gofakes3
// (github.com/johannesboyne/gofakes3) used as a library, so that it listens on 127.0.0.1 only and
// takes its address from a flag. It lives in its own Go module so gofakes3's dependencies stay out
// of the application's.
//
//	s3local -addr 127.0.0.1:4200 [-dir DIR] [-bucket NAME]... [-ignore-interrupt]
//
// Objects are kept in memory, gone when it exits, or with -dir in files under DIR, kept across
// runs (`make run` keeps the archived history there, since the database no longer holds it).
// -bucket creates a bucket at start (the stack's bucket exists before the application runs; the
// application never creates one). Path-style addressing only (http://127.0.0.1:4200/bucket/key):
// clients set UsePathStyle.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

type buckets []string

func (b *buckets) String() string     { return strings.Join(*b, ",") }
func (b *buckets) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	addr := flag.String("addr", "127.0.0.1:4200", "loopback address to listen on")
	dir := flag.String("dir", "", "keep objects in files under this directory (default: in memory)")
	var initial buckets
	flag.Var(&initial, "bucket", "a bucket to create at start, if missing (repeatable)")
	ignoreInterrupt := flag.Bool("ignore-interrupt", false, "stop on SIGTERM only: scripts/run.sh stops it after "+
		"the runner has stopped, so a terminal's Ctrl-C (SIGINT to the whole process group) must not stop it first")
	flag.Parse()

	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		fail(2, "-addr: %v", err)
	}
	var backend gofakes3.Backend = s3mem.New()
	if *dir != "" {
		fs, err := s3afero.FsPath(*dir, s3afero.FsPathCreateAll)
		if err != nil {
			fail(1, "-dir: %v", err)
		}
		if backend, err = s3afero.MultiBucket(fs); err != nil {
			fail(1, "-dir: %v", err)
		}
	}
	for _, b := range initial {
		ok, err := backend.BucketExists(b)
		if err == nil && !ok {
			err = backend.CreateBucket(b)
		}
		if err != nil {
			fail(1, "create bucket %q: %v", b, err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fail(1, "%v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port // -addr may say port 0

	// gofakes3 checks Content-MD5 when a client sends one, and the time of signed requests against
	// its clock; it logs nothing unless asked.
	faker := gofakes3.New(backend, gofakes3.WithTimeSkewLimit(15*time.Minute))
	srv := &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
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
	fmt.Printf("s3local listening on http://%s:%d\n", host, port)
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fail(1, "%v", err)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "s3local: "+format+"\n", args...)
	os.Exit(code)
}
