package config

import "github.com/aws/aws-sdk-go-v2/aws"

// WrapRequestBodies exposes SQSHTTPClient's body wrapping to the tests, around any HTTP client.
func WrapRequestBodies(next aws.HTTPClient) aws.HTTPClient { return bodyWrapping{next} }
