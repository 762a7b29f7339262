// Package awsenv loads this process's AWS SDK configuration: config.LoadDefaultConfig's everywhere,
// and in a Lambda bootstrap (built with -tags lambda.norpc, as every function is: infra.mk's
// LAMBDA_BUILD_FLAGS, internal/rie.Build) Lambda's, built from the environment Lambda gives a
// function with the SDK's smaller packages (aws, credentials, credentials/endpointcreds,
// aws/transport/http).
//
// Why two: a package a bootstrap links is initialised at each cold start, and config's credential
// chain links the STS, SSO, SSO OIDC and sign-in clients (their endpoint rules and schemas: 0.4-0.5
// ms of a 3.4-4.8 ms start, and 1.5-2.2 MB of a bootstrap) for sources a function never has: shared
// config and credentials files, profiles, web identity, assumed roles, SSO, IMDS. A function has its
// role's credentials in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or (SnapStart,
// managed instances) from the container credentials endpoint. Lambda's configuration reads those and
// the settings a function here may use (docs/configuration.md, "AWS SDK settings on Lambda"):
//
//   - AWS_REGION, else AWS_DEFAULT_REGION;
//   - AWS_ACCESS_KEY_ID (or AWS_ACCESS_KEY), AWS_SECRET_ACCESS_KEY (or AWS_SECRET_KEY),
//     AWS_SESSION_TOKEN, AWS_ACCOUNT_ID; else AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or
//     AWS_CONTAINER_CREDENTIALS_FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE);
//   - AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS;
//   - AWS_MAX_ATTEMPTS, AWS_RETRY_MODE;
//   - AWS_CA_BUNDLE;
//   - AWS_REQUEST_CHECKSUM_CALCULATION, AWS_RESPONSE_CHECKSUM_VALIDATION, AWS_SDK_UA_APP_ID.
//
// Each as config reads it, with its errors for a bad value. Every other setting config.LoadDefaultConfig
// would act on (Refused) is refused by Check, which each function's bootstrap calls at init: a
// function whose configuration sets one fails its init, naming it, rather than running without it.
package awsenv

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Load returns the process's AWS configuration, read from the environment now: config.LoadDefaultConfig's,
// or Lambda's in a bootstrap built with -tags lambda.norpc. Callers share one (internal/wire/boot.AWS).
func Load(ctx context.Context) (aws.Config, error) { return load(ctx) }

// Check refuses, in a bootstrap built with -tags lambda.norpc, an AWS setting of the environment
// that Lambda's configuration does not implement (Refused); elsewhere it returns nil.
func Check() error { return check() }

// LambdaBuild reports whether this binary loads Lambda's configuration (built with -tags lambda.norpc).
func LambdaBuild() bool { return lambdaBuild }
