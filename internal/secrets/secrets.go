// Package secrets reads secret strings from AWS Secrets Manager, once per process.
//
// The functions that deliver webhooks (processor, sweeper) get the ARN of the signing secret as
// WEBHOOK_SECRET_ARN, never the value: the value stays out of the CloudFormation template, the
// function's configuration and its logs. Resolve reads it at cold start and keeps it for the life of
// the execution environment, so a warm invocation makes no call; a rotated value (docs/deploy.md,
// "Webhook delivery") is picked up by environments started after the rotation.
//
// The client is the AWS SDK's, configured from the environment as every other client of the project
// is (credentials of the function's role, AWS_REGION), and it honours AWS_ENDPOINT_URL and
// AWS_ENDPOINT_URL_SECRETS_MANAGER (LocalStack, tests).
package secrets

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"
	"github.com/exactlyonce/exactlyonce/internal/awsenv"
)

// ErrNoString is returned for a secret that holds binary data (SecretBinary) and no string.
var ErrNoString = errors.New("the secret holds no string value")

// Cache resolves secrets and keeps each value it read successfully for its own lifetime. The zero
// value is ready to use and loads its AWS configuration from the environment on first use. Failures
// are not kept: the next call tries again.
type Cache struct {
	// Client, if set, is used instead of one configured from the environment.
	Client *secretsmanager.Client
	// Config, if set (and Client is not), is the AWS configuration the client is built from: the
	// process's own, loaded once and shared by all its clients (internal/wire's AWS), rather than a
	// second config.LoadDefaultConfig, which reads the environment and shared files again, and parses
	// AWS_CA_BUNDLE again where it is set (4 ms).
	Config func() (aws.Config, error)

	mu     sync.Mutex
	values map[string]string
}

var process Cache

// Resolve returns the string value (SecretString, AWSCURRENT stage) of the secret arn, read from
// Secrets Manager on the first call for that arn in this process and from memory after. Its errors
// never hold the value: only the arn, the API's error code and message, or the transport's error.
func Resolve(ctx context.Context, arn string) (string, error) {
	return process.Resolve(ctx, arn)
}

// Resolve is the package's Resolve on this cache.
func (c *Cache) Resolve(ctx context.Context, arn string) (string, error) {
	if arn == "" {
		return "", errors.New("secrets: no secret ARN given")
	}
	c.mu.Lock()
	v, ok := c.values[arn]
	client := c.Client
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	if client == nil {
		load := c.Config
		if load == nil {
			load = func() (aws.Config, error) { return awsenv.Load(ctx) }
		}
		cfg, err := load()
		if err != nil {
			return "", fmt.Errorf("secrets: AWS configuration: %w", err)
		}
		client = secretsmanager.NewFromConfig(cfg)
	}

	// Outside the lock: a slow call does not hold up callers of other secrets. Two concurrent first
	// calls for one arn both read it; the first value stored is the one every caller gets.
	out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return "", describe(arn, err)
	}
	if out.SecretString == nil {
		return "", fmt.Errorf("secrets: reading %s: %w", arn, ErrNoString)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.values[arn]; ok {
		return v, nil
	}
	if c.values == nil {
		c.values = map[string]string{}
	}
	c.values[arn] = *out.SecretString
	return *out.SecretString, nil
}

// describe turns an error of GetSecretValue into one that names what went wrong without any of the
// answer's body: an answer that could not be decoded may be a successful one, holding the value,
// and the SDK's decoding errors can quote it.
func describe(arn string, err error) error {
	var apiErr smithy.APIError
	var decode *smithy.DeserializationError
	switch {
	case errors.As(err, &decode):
		status := ""
		var resp *awshttp.ResponseError
		if errors.As(err, &resp) {
			status = fmt.Sprintf(" (HTTP %d)", resp.HTTPStatusCode())
		}
		return fmt.Errorf("secrets: reading %s: the answer could not be decoded%s", arn, status)
	case errors.As(err, &apiErr):
		// The service's own error (AccessDeniedException, ResourceNotFoundException, ...): its
		// code and message say what to fix, and Secrets Manager does not put values in them.
		return fmt.Errorf("secrets: reading %s: %s: %s", arn, apiErr.ErrorCode(), apiErr.ErrorMessage())
	default:
		// Transport errors (no route, TLS, timeout, cancelled context) carry no answer.
		return fmt.Errorf("secrets: reading %s: %w", arn, err)
	}
}
