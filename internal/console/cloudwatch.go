package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
	"github.com/exactlyonce/exactlyonce/internal/metrics"
)

// GetMetricDataAction is the one IAM action CloudWatchRates needs, on "*" (CloudWatch's metric reads
// have no resource-level permissions).
const GetMetricDataAction = "cloudwatch:GetMetricData"

// ratePeriod is the period of the CloudWatch sums: a minute, the finest that EMF metrics (standard
// resolution) have.
const ratePeriod = 60 * time.Second

// maxMetricDataPages bounds the pages of one GetMetricData: three metrics of five points fit in one.
const maxMetricDataPages = 5

// CloudWatchRates is the RatesSource of a deployed stack (`make ui`): the sums per minute of the
// last RatesWindow of the metrics the functions publish (namespace ExactlyOnce, dimension
// FunctionName, README "Metrics"), in one GetMetricData call per question: EventsCreatedSync of the
// api function (a sync create is processed at birth) and EventsProcessed of the processor and
// sweeper functions. A standalone agent publishes to Prometheus, not CloudWatch: its path is not
// measured.
type CloudWatchRates struct {
	client    *cloudwatch.Client
	functions map[string]string // path -> the function's name
	now       func() time.Time
}

// The function each path's metric comes from, and the metric.
var cloudWatchPaths = map[string]metrics.Metric{
	PathAPI:       metrics.EventsCreatedSync,
	PathProcessor: metrics.EventsProcessed,
	PathSweeper:   metrics.EventsProcessed,
}

// NewCloudWatchRates returns the CloudWatch source reading with client the metrics of functions,
// path (api, processor, sweeper) to the Lambda function's name. A path left out is not measured;
// with none, every answer says the function names are missing.
func NewCloudWatchRates(client *cloudwatch.Client, functions map[string]string) (*CloudWatchRates, error) {
	for path, name := range functions {
		if _, ok := cloudWatchPaths[path]; !ok {
			return nil, fmt.Errorf("console: rates: unknown path %q (want api, processor or sweeper: the functions that publish to CloudWatch)", path)
		}
		if name == "" {
			return nil, fmt.Errorf("console: rates: the %s function's name is empty", path)
		}
	}
	return &CloudWatchRates{client: client, functions: functions, now: time.Now}, nil
}

// Rates asks CloudWatch for the sums per minute of the last RatesWindow's whole minutes and
// divides them by the window. A minute without a datapoint is one without an invocation: none.
// The last minute's sums may still be arriving (EMF lines reach CloudWatch through the logs within
// a minute or so), so the rates can read a little low.
func (s *CloudWatchRates) Rates(ctx context.Context) (Rates, error) {
	out := Rates{Source: "cloudwatch", PerSecond: map[string]float64{}}
	for _, p := range ratePaths {
		if s.functions[p] == "" {
			out.NotMeasured = append(out.NotMeasured, p)
		}
	}
	if len(s.functions) == 0 {
		return out, &Unavailable{Why: "the names of the stack's functions are not configured: set FUNCTIONS=api=<name>,processor=<name>,sweeper=<name> (make ui)"}
	}
	end := s.now().Truncate(time.Minute)
	start := end.Add(-RatesWindow)
	in := &cloudwatch.GetMetricDataInput{StartTime: aws.Time(start), EndTime: aws.Time(end), ScanBy: types.ScanByTimestampAscending}
	for _, p := range ratePaths {
		name := s.functions[p]
		if name == "" {
			continue
		}
		in.MetricDataQueries = append(in.MetricDataQueries, types.MetricDataQuery{
			Id: aws.String(p), // a path's name is a valid id: a lower-case letter, then letters
			MetricStat: &types.MetricStat{
				Metric: &types.Metric{Namespace: aws.String(metrics.Namespace), MetricName: aws.String(cloudWatchPaths[p].Name()),
					Dimensions: []types.Dimension{{Name: aws.String(metrics.FunctionNameDimension), Value: aws.String(name)}}},
				Period: aws.Int32(int32(ratePeriod / time.Second)),
				Stat:   aws.String("Sum"),
			},
			ReturnData: aws.Bool(true),
		})
	}
	sums := map[string]float64{}
	for page := 0; ; page++ {
		if page == maxMetricDataPages {
			return out, fmt.Errorf("GetMetricData: still a next page after %d", page)
		}
		res, err := s.client.GetMetricData(ctx, in)
		if err != nil {
			if denied(err) {
				return out, &Unavailable{Why: "CloudWatch refused to give the metrics: the console's AWS credentials need the IAM action " + GetMetricDataAction}
			}
			return out, fmt.Errorf("GetMetricData: %w", err)
		}
		for _, r := range res.MetricDataResults {
			id := aws.ToString(r.Id)
			if !slices.Contains(ratePaths, id) {
				return out, fmt.Errorf("GetMetricData: an answer for the unknown query %q", id)
			}
			switch r.StatusCode {
			case types.StatusCodeForbidden:
				return out, &Unavailable{Why: "CloudWatch refused to give the metrics of the " + id + " function: the console's AWS credentials need the IAM action " + GetMetricDataAction}
			case types.StatusCodeInternalError:
				return out, fmt.Errorf("GetMetricData: %s: internal error %v", id, r.Messages)
			}
			for _, v := range r.Values {
				sums[id] += v
			}
		}
		if in.NextToken = res.NextToken; aws.ToString(in.NextToken) == "" {
			break
		}
	}
	out.Window = end.Sub(start)
	for p, n := range sums {
		out.PerSecond[p] = n / out.Window.Seconds()
	}
	return out, nil
}

// denied says whether err is CloudWatch refusing the caller (IAM), which the operator can mend.
func denied(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && strings.Contains(api.ErrorCode(), "AccessDenied")
}
