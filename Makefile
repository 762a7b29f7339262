# The two commands a newcomer needs: `make run` and `make test`. Both install and start what they need.
SHELL := bash
GO ?= go
PKGS := . ./client/... ./cmd/... ./functions/... ./internal/...
FUNCTIONS := api processor sweeper migrate counter
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

.PHONY: help run test test-go test-db no-build-output db sqslocal s3local rie browser local agent redrive ui vet clean
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
		'{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1) } \
		 END { f = "  %-" w "s  %s\n"; for (i = 1; i <= NR; i++) printf f, name[i], text[i] }'

run: db sqslocal s3local local ## run the whole system locally (MariaDB, local SQS and S3, API and console on :8080, processor, sweeper)
	scripts/run.sh

test: no-build-output test-db sqslocal s3local rie browser ## every test: unit, integration (MariaDB + SQS protocol), the console in Chromium, failure scenarios, infrastructure, bench smoke
	$(MAKE) test-go
	$(if $(strip $(TEST_TAIL)),$(MAKE) -j3 --output-sync=target $(TEST_TAIL) BENCH_OUT=build/bench-smoke.json BENCH_DB_DSN='$(TEST_DB_DSN)')

# After the Go tests, side by side (each one's output printed whole when it ends): the short chaos
# run (30 s of kills and restarts on a private server), the benchmark smoke run on the tests'
# server, and the infrastructure's tests. None judges a speed, and together they take as long as
# the benchmark smoke alone (2.5 minutes, not 3.5).
TEST_TAIL := $(if $(wildcard chaos.mk),chaos-short) $(if $(wildcard bench.mk),bench-smoke) $(if $(wildcard infra.mk),test-infra)

# The tests' own MariaDB (scripts/mariadb.sh ensure-test): files in memory when there is room.
# internal/testdb finds it by itself; TEST_DB_DSN set in the environment wins.
TEST_DB_DSN ?= exactlyonce:exactlyonce@tcp(127.0.0.1:13306)/

test-db: ## start the tests' own MariaDB (in memory when there is room); `go test` uses it when it runs
	scripts/mariadb.sh ensure-test >/dev/null

# -p 4: four test binaries at a time on two cores. Most of a test's time is spent waiting (pulses,
# expirations, visibility timeouts, the database), so the default (one per core) left the cores half
# idle: 5m25s for the Go tests with it, 4m33s with -p 4, on the same loaded machine.
test-go: test-db ## the Go tests of the application
	SQSLOCAL_BIN=$(CURDIR)/bin/sqslocal S3LOCAL_BIN=$(CURDIR)/bin/s3local RIE_BIN=$(CURDIR)/bin/aws-lambda-rie $(GO) test -p 4 -count=1 -race -timeout 20m $(PKGS)

no-build-output: ## fail if git tracks an executable or object file, or .gitignore misses where a build writes
	scripts/no-build-output.sh

db: ## install and start MariaDB if needed, and create the project's user
	scripts/mariadb.sh ensure

browser: ## install Debian's Chromium and the pinned axe-core (npm ci) for the console's browser tests
	scripts/chromium.sh ensure
	$(MAKE) --no-print-directory $(NODE_MODULES_STAMP)

sqslocal: ## build the local SQS endpoint (goaws as a library, its own module)
	cd tools/sqslocal && $(GO) build -o ../../bin/sqslocal .

s3local: ## build the local S3 endpoint (gofakes3 as a library, its own module)
	cd tools/s3local && $(GO) build -o ../../bin/s3local .

rie: ## build the AWS Lambda Runtime Interface Emulator (pinned in tools/rie/go.mod) into bin/aws-lambda-rie
	cd tools/rie && $(GO) build -o ../../bin/aws-lambda-rie github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie

local: ## build the local runner
	$(GO) build -o bin/local ./cmd/local

# -local: the database as `make run` reads it, so that DB_NAME=x make agent joins DB_NAME=x make run.
agent: db ## build and run a standalone agent on `make run`'s database (DB_NAME as for make run); run it in several terminals to see them split the work
	$(GO) build -o bin/agent ./cmd/agent
	bin/agent -local

redrive: ## move a DLQ's messages back to its source queue: QUEUE=events (DRY_RUN=1 lists only; LOCAL=1 for `make run`'s SQS; DLQ=<name> checks it is the queue's own DLQ)
	$(GO) build -o bin/redrive ./cmd/redrive
	bin/redrive

ui: ## the operators' console against a deployed stack, on 127.0.0.1:8081: API_URL=<ApiUrl output> (UI_ADDR, QUEUES, FUNCTIONS; signs with your AWS credentials)
	$(GO) build -o bin/ui ./cmd/ui
	bin/ui

vet: ## static checks
	$(GO) vet $(PKGS) ./localstack/
	@test -z "$$(gofmt -l client cmd functions internal tools)" || { gofmt -l client cmd functions internal tools; exit 1; }

clean: ## remove build output
	rm -rf bin build cdk.out

-include infra.mk
-include bench.mk
-include chaos.mk
