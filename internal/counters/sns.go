package counters

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SNSPublisher publishes notifications to an SNS topic, ten per PublishBatch call, through SNS's
// query protocol signed with the SDK's SigV4 signer (the project carries no SNS client: this is
// the one call it needs). Locally, goaws serves the same protocol.
type SNSPublisher struct {
	// TopicARN is the topic published to.
	TopicARN string
	// AWS gives the credentials and the region.
	AWS aws.Config
	// Endpoint is SNS's URL: default AWS_ENDPOINT_URL_SNS, AWS_ENDPOINT_URL, or the region's.
	Endpoint string
	// HTTP defaults to a client with a 10 s timeout.
	HTTP *http.Client
	// Batch is the most notifications per PublishBatch call: SNS takes 10 (the default); goaws
	// v0.5.4 counts one entry too many and refuses 10, so local runs use LocalSNSBatch.
	Batch int
}

// LocalSNSBatch is SNSPublisher.Batch for goaws.
const LocalSNSBatch = 9

// SNSEndpoint returns the SNS endpoint the environment names (AWS_ENDPOINT_URL_SNS,
// AWS_ENDPOINT_URL), or the region's.
func SNSEndpoint(region string) string {
	for _, k := range []string{"AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "https://sns." + region + ".amazonaws.com"
}

// Publish publishes every notification and returns the ids of those SNS accepted.
func (p *SNSPublisher) Publish(ctx context.Context, ns []Notification) ([]string, error) {
	var published []string
	var errs []error
	batch := p.Batch
	if batch <= 0 || batch > 10 {
		batch = 10
	}
	for start := 0; start < len(ns); start += batch {
		chunk := ns[start:min(start+batch, len(ns))]
		form := url.Values{"TopicArn": {p.TopicARN}}
		for i, n := range chunk {
			k := "PublishBatchRequestEntries.member." + strconv.Itoa(i+1)
			form.Set(k+".Id", n.ID)
			form.Set(k+".Message", string(n.Body))
		}
		var out struct {
			Successful []struct {
				ID string `xml:"Id"`
			} `xml:"PublishBatchResult>Successful>member"`
			Failed []struct {
				ID      string `xml:"Id"`
				Code    string `xml:"Code"`
				Message string `xml:"Message"`
			} `xml:"PublishBatchResult>Failed>member"`
		}
		if err := p.call(ctx, "PublishBatch", form, &out); err != nil {
			errs = append(errs, err)
			continue
		}
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[f.ID] = true
			errs = append(errs, fmt.Errorf("notification %s: %s: %s", f.ID, f.Code, f.Message))
		}
		for _, n := range chunk {
			if !failed[n.ID] {
				published = append(published, n.ID)
			}
		}
	}
	return published, errors.Join(errs...)
}

// CreateTopic creates the topic named name (idempotent) and returns its ARN.
func (p *SNSPublisher) CreateTopic(ctx context.Context, name string) (string, error) {
	var out struct {
		ARN string `xml:"CreateTopicResult>TopicArn"`
	}
	if err := p.call(ctx, "CreateTopic", url.Values{"Name": {name}}, &out); err != nil {
		return "", err
	}
	return out.ARN, nil
}

// SubscribeQueue subscribes the SQS queue queueARN to the topic, delivering each message's body
// as it was published (raw delivery).
func (p *SNSPublisher) SubscribeQueue(ctx context.Context, queueARN string) error {
	var out struct{}
	return p.call(ctx, "Subscribe", url.Values{"TopicArn": {p.TopicARN}, "Protocol": {"sqs"}, "Endpoint": {queueARN},
		"Attributes.entry.1.key": {"RawMessageDelivery"}, "Attributes.entry.1.value": {"true"}}, &out)
}

// call posts one signed query-protocol request and decodes its XML answer into out.
func (p *SNSPublisher) call(ctx context.Context, action string, form url.Values, out any) error {
	form.Set("Action", action)
	form.Set("Version", "2010-03-31")
	body := []byte(form.Encode())
	endpoint := p.Endpoint
	if endpoint == "" {
		endpoint = SNSEndpoint(p.AWS.Region)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(endpoint, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if p.AWS.Credentials != nil {
		creds, err := p.AWS.Credentials.Retrieve(ctx)
		if err != nil {
			return fmt.Errorf("sns %s: credentials: %w", action, err)
		}
		sum := sha256.Sum256(body)
		if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "sns", p.AWS.Region, time.Now()); err != nil {
			return fmt.Errorf("sns %s: sign: %w", action, err)
		}
	}
	client := p.HTTP
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("sns %s: %w", action, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("sns %s: %w", action, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sns %s: HTTP %d: %s", action, resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 300)]))
	}
	if err := xml.Unmarshal(b, out); err != nil {
		return fmt.Errorf("sns %s: answer: %w", action, err)
	}
	return nil
}
