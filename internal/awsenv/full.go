//go:build !lambda.norpc

package awsenv

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

const lambdaBuild = false

func load(ctx context.Context) (aws.Config, error) { return awsconfig.LoadDefaultConfig(ctx) }

func check() error { return nil }
