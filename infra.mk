# infra.mk: build, synthesise, deploy and test the infrastructure (the CDK app in infra/).
# Included by the root Makefile (`-include infra.mk`); every variable can be overridden on the command
# line, e.g. `make synth CDK_CONTEXT="-c publicApi=true"`.
#
#   make lambdas     build/lambda/<fn>/bootstrap for each function (linux/arm64, provided.al2023)
#   make synth       lambdas + cdk synth -> cdk.out/$(CDK_STACK).template.json (no AWS account, no
#                    network); fails on any cdk-nag AwsSolutions finding that is not suppressed
#   make deploy      lambdas + cdk deploy (needs AWS credentials and a bootstrapped account/region)
#   make destroy     cdk destroy
#   make test-infra  Go tests of infra/ (template assertions + cdk-nag), no AWS, no Docker
#   make synth-localstack / deploy-localstack / destroy-localstack: the LocalStack variant (localstack/README.md)

GO ?= go
NPM ?= npm

# --- Lambda bootstraps (docs/contract.md) ---------------------------------------------------------
LAMBDA_FUNCTIONS ?= $(if $(FUNCTIONS),$(FUNCTIONS),api processor sweeper migrate counter)
LAMBDA_DIR ?= build/lambda
LAMBDA_GOOS ?= linux
LAMBDA_GOARCH ?= arm64
# The CDK app's name for the same architecture (passed as -c lambdaArch=...).
LAMBDA_ARCH = $(if $(filter amd64,$(LAMBDA_GOARCH)),x86_64,arm64)
LAMBDA_BUILD_FLAGS ?= -tags lambda.norpc -trimpath -ldflags "-s -w"

# --- CDK --------------------------------------------------------------------------------------------
CDK_STACK ?= ExactlyOnce
CDK_OUT ?= cdk.out
# Extra context, e.g. CDK_CONTEXT="-c publicApi=true".
CDK_CONTEXT ?=
CDK_DEPLOY_FLAGS ?=
CDK_DESTROY_FLAGS ?=
CDK_OUTPUTS_FILE ?= build/cdk-outputs.json
# The pinned CLI from package.json/package-lock.json (installed by `npm ci`).
CDK ?= node_modules/.bin/cdk
CDKLOCAL ?= node_modules/.bin/cdklocal
NODE_MODULES_STAMP := node_modules/.npm-ci.stamp
CDK_ALL_CONTEXT = -c lambdaArch=$(LAMBDA_ARCH) $(CDK_CONTEXT)

# LocalStack variant (localstack/README.md). The DSN and endpoint are as seen from Lambda containers on
# the compose network; the defaults match localstack/docker-compose.yml.
LOCALSTACK_DB_DSN ?= app:app@tcp(mysql:3306)/events?parseTime=true&interpolateParams=true
LOCALSTACK_ENDPOINT_URL ?= http://localstack:4566
LOCALSTACK_REGION ?= us-east-1
# cdklocal strips AWS_* variables unless allow-listed; LocalStack accepts any credentials.
CDKLOCAL_ENV = AWS_ENVAR_ALLOWLIST=AWS_REGION,AWS_DEFAULT_REGION,AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY \
	AWS_REGION=$(LOCALSTACK_REGION) AWS_DEFAULT_REGION=$(LOCALSTACK_REGION) \
	AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
LOCALSTACK_CONTEXT = -c localstack=true -c 'dbDsn=$(LOCALSTACK_DB_DSN)' -c awsEndpointUrl=$(LOCALSTACK_ENDPOINT_URL)

# --- Test ---------------------------------------------------------------------------------------------
INFRA_TEST_FLAGS ?= -count=1 -timeout 20m

# jsii (the bridge from Go to the CDK's JavaScript) warns loudly about old Node versions; CDK CLI
# telemetry and version checks would reach out to the network.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := $(shell node -p 'process.versions.node.split(".")[0]' 2>/dev/null)
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := true

.PHONY: lambdas synth deploy destroy diff test-infra synth-localstack deploy-localstack destroy-localstack

lambdas: ## build build/lambda/<fn>/bootstrap for every function (linux/arm64)
	@for fn in $(LAMBDA_FUNCTIONS); do \
		echo "go build -> $(LAMBDA_DIR)/$$fn/bootstrap ($(LAMBDA_GOOS)/$(LAMBDA_GOARCH))"; \
		GOOS=$(LAMBDA_GOOS) GOARCH=$(LAMBDA_GOARCH) CGO_ENABLED=0 \
			$(GO) build $(LAMBDA_BUILD_FLAGS) -o $(LAMBDA_DIR)/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done

# node_modules/go.mod makes the go tool treat node_modules as another module, so that `go build ./...`
# and `go vet ./...` at the root skip the Go files some npm packages ship (the CDK's init templates).
$(NODE_MODULES_STAMP): package.json package-lock.json
	$(NPM) ci --no-audit --no-fund
	@printf 'module ignored/node_modules\n' > node_modules/go.mod
	@touch $@

synth: lambdas $(NODE_MODULES_STAMP) ## cdk synth -> cdk.out/<stack>.template.json, offline
	AWS_EC2_METADATA_DISABLED=true $(CDK) synth $(CDK_STACK) --quiet --strict --lookups false --no-notices \
		-o $(CDK_OUT) $(CDK_ALL_CONTEXT)
	@echo "synthesised $(CDK_OUT)/$(CDK_STACK).template.json"

diff: lambdas $(NODE_MODULES_STAMP) ## cdk diff against the deployed stack (needs AWS credentials)
	$(CDK) diff $(CDK_STACK) $(CDK_ALL_CONTEXT)

deploy: lambdas $(NODE_MODULES_STAMP) ## cdk deploy (needs AWS credentials; see docs/deploy.md)
	@mkdir -p $(dir $(CDK_OUTPUTS_FILE))
	$(CDK) deploy $(CDK_STACK) $(CDK_ALL_CONTEXT) --outputs-file $(CDK_OUTPUTS_FILE) $(CDK_DEPLOY_FLAGS)

destroy: lambdas $(NODE_MODULES_STAMP) ## cdk destroy (the database leaves a final snapshot)
	$(CDK) destroy $(CDK_STACK) $(CDK_ALL_CONTEXT) $(CDK_DESTROY_FLAGS)

test-infra: ## Go tests of the CDK app: template assertions and cdk-nag (no AWS, no Docker)
	@test -z "$$(gofmt -l infra)" || { echo "gofmt needed:"; gofmt -l infra; exit 1; }
	cd infra && $(GO) vet ./... && $(GO) test $(INFRA_TEST_FLAGS) ./...

synth-localstack: ## synth the LocalStack variant (no VPC/Aurora/Proxy; DB_DSN to your MySQL)
	$(MAKE) synth CDK_CONTEXT="$(LOCALSTACK_CONTEXT) $(CDK_CONTEXT)"

deploy-localstack: lambdas $(NODE_MODULES_STAMP) ## deploy the LocalStack variant with cdklocal (LocalStack running)
	$(CDKLOCAL_ENV) $(CDKLOCAL) bootstrap aws://000000000000/$(LOCALSTACK_REGION) $(CDK_ALL_CONTEXT) $(LOCALSTACK_CONTEXT)
	$(CDKLOCAL_ENV) $(CDKLOCAL) deploy $(CDK_STACK) $(CDK_ALL_CONTEXT) $(LOCALSTACK_CONTEXT) --require-approval never \
		--outputs-file build/cdk-outputs.localstack.json

destroy-localstack: lambdas $(NODE_MODULES_STAMP) ## destroy the LocalStack variant
	$(CDKLOCAL_ENV) $(CDKLOCAL) destroy $(CDK_STACK) $(CDK_ALL_CONTEXT) $(LOCALSTACK_CONTEXT) --force
