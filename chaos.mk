# Failure testing: the chaos run, the real bootstraps under the Lambda Runtime Interface Emulator, LocalStack,
# fuzzing. Included by the root Makefile (`-include chaos.mk`). docs/guarantees.md explains each.
GO ?= go
CHAOS_DURATION ?= 3m
CHAOS_FLAGS ?=
FN ?= api
# Empty: every sample of the function (events/<FN>.json and events/<FN>-*.json, in name order).
EVENT ?=
FUZZTIME ?= 60s

.PHONY: chaos chaos-short chaos-local invoke test-localstack fuzz-api

chaos: db sqslocal ## the long chaos run (CHAOS_DURATION=3m): kills (APIs too), lock contention, database restarts, poison, packers racing late creates of old ids; checks the invariants, prints the figures
	$(GO) build -o bin/chaos ./cmd/chaos
	SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal bin/chaos -duration $(CHAOS_DURATION) -clients 8 -processors 3 -sweepers 3 -apis 2 -db-restarts 4 -poison 10 -require-retries $(CHAOS_FLAGS)

chaos-short: db sqslocal ## the short chaos run (30 s of creates); `make test` runs the same as TestChaosShort
	$(GO) build -o bin/chaos ./cmd/chaos
	SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal bin/chaos -duration 30s -clients 6 -processors 2 -sweepers 2 -kill-every 1s -poison 4 -visibility 2 -max-receive 8 -require-retries $(CHAOS_FLAGS)

chaos-local: test-db sqslocal ## the local runner (`make run`'s bin/local, one process) SIGKILLed 10 times while clients create events and tasks, keyed or not; about 2.5 min (its tasks' 2-minute leases run out)
	CHAOS_LOCAL=1 SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal $(GO) test -count=1 -timeout 10m -v -run '^TestLocalRunnerKilledWhileCreating$$' ./internal/local/

invoke: db sqslocal rie ## run a function's real bootstrap under the Lambda Runtime Interface Emulator on its samples: make invoke FN=api [EVENT=events/api-post-task.json]
	SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal RIE_BIN=$(CURDIR)/bin/aws-lambda-rie $(GO) run ./cmd/invoke -fn $(FN) $(if $(EVENT),-event $(EVENT))

test-localstack: ## the end-to-end flows through LocalStack and the compose MySQL; skips when they are not running (localstack/TESTING.md)
	$(GO) test -count=1 -v -timeout 30m ./localstack/

fuzz-api: db ## fuzz the API handler for FUZZTIME (default 60s); the corpus in internal/api/testdata/fuzz runs in every `make test`
	$(GO) test -run '^$$' -fuzz FuzzAPI -fuzztime $(FUZZTIME) ./internal/api
