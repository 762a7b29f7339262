# Benchmarks (docs/performance.md). Included by the root Makefile (`-include bench.mk`).
#
#   make bench                 the full run: minutes; prints a table, writes $(BENCH_OUT)
#   make bench BENCH=smoke     minutes (every group at toy sizes: 102 s on the tests' server, quiet machine); targets not judged (CI runs it)
#   make bench-smoke           the same as BENCH=smoke
#
# BENCH_OUT names the JSON file (default bench-results.json, git-ignored); BENCH_GROUPS=alloc,claim
# runs only some groups; BENCH_ARCHIVED=<events> sizes the archive group's archived history (default
# 20000000; about 62 bytes of disk each under TMPDIR, checked before it writes: docs/performance.md).
# Needs MariaDB (`make db`), goaws (`make sqslocal`) and gofakes3 (`make s3local`), which it builds.
BENCH ?= full
BENCH_OUT ?= bench-results.json

.PHONY: bench bench-smoke

bench: db sqslocal s3local ## measure every hot path side by side (BENCH=smoke|full, BENCH_OUT=file.json)
	BENCH=$(BENCH) BENCH_OUT=$(BENCH_OUT) SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal S3LOCAL_BIN=$(CURDIR)/bin/s3local $(GO) run ./cmd/bench

bench-smoke: db sqslocal s3local ## the benchmark at toy sizes (minutes) CI runs so the harness never rots
	BENCH=smoke BENCH_OUT=$(BENCH_OUT) SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal S3LOCAL_BIN=$(CURDIR)/bin/s3local $(GO) run ./cmd/bench
