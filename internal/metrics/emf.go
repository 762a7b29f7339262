// Package metrics writes CloudWatch metrics as Embedded Metric Format (EMF) lines: one JSON object
// per line, which CloudWatch Logs turns into metrics when the line reaches a log group. On Lambda a
// function's stdout is its log group, so publishing a metric is writing a line: no API call on the
// function's path, no cloudwatch:PutMetricData permission, and the values stay beside the logs.
//
// The encoder follows the EMF specification
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
//
//	{"_aws": {"Timestamp": <ms since the epoch>,
//	          "CloudWatchMetrics": [{"Namespace": "...", "Dimensions": [["Function"]],
//	                                 "Metrics": [{"Name": "Settled", "Unit": "Count"}]}]},
//	 "Function": "sweeper", "Settled": 3}
//
// Each dimension and each metric named in the directive is a member of the root object: dimensions
// with string values, metrics with numbers or arrays of up to 100 numbers.
package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Unit is a CloudWatch unit.
type Unit string

// The units used so far; any CloudWatch unit is accepted (see units).
const (
	Count        Unit = "Count"
	Seconds      Unit = "Seconds"
	Milliseconds Unit = "Milliseconds"
	None         Unit = "None"
)

// units are the units CloudWatch accepts (StandardUnit); the specification requires one of them.
var units = map[Unit]bool{
	"Seconds": true, "Microseconds": true, "Milliseconds": true,
	"Bytes": true, "Kilobytes": true, "Megabytes": true, "Gigabytes": true, "Terabytes": true,
	"Bits": true, "Kilobits": true, "Megabits": true, "Gigabits": true, "Terabits": true,
	"Percent": true, "Count": true,
	"Bytes/Second": true, "Kilobytes/Second": true, "Megabytes/Second": true, "Gigabytes/Second": true, "Terabytes/Second": true,
	"Bits/Second": true, "Kilobits/Second": true, "Megabits/Second": true, "Gigabits/Second": true, "Terabits/Second": true,
	"Count/Second": true, "None": true,
}

// Dimension is one dimension of every value of a Line: a name and its value.
type Dimension struct {
	Name, Value string
}

// Value is one metric's measurement: its name, its unit and its value, or its values when Values
// is set (an EMF array of up to 100 values, each a datapoint to CloudWatch's statistics).
type Value struct {
	Name   string
	Unit   Unit
	Value  float64
	Values []float64
}

// Line is what one EMF line holds: values measured at one time, in one namespace, under one set of
// dimensions. A value that could not be measured is left out: a missing datapoint, which an alarm
// can treat as breaching, says more than a made-up zero.
type Line struct {
	Namespace  string
	Dimensions []Dimension
	Time       time.Time
	Values     []Value
}

// The specification's limits.
const (
	maxDimensions = 30  // dimension keys in one dimension set
	maxMetrics    = 100 // metric definitions in one directive
	maxValues     = 100 // values in one metric's array
)

// Encode returns the line as one EMF JSON object, without a newline. It refuses what CloudWatch
// would reject or silently drop: no namespace, no values, an unknown unit, a value that is not a
// finite number, and a name used twice (a dimension and a metric are both members of one object).
func (l Line) Encode() ([]byte, error) {
	if l.Namespace == "" {
		return nil, errors.New("metrics: a namespace is required")
	}
	if len(l.Values) == 0 || len(l.Values) > maxMetrics {
		return nil, fmt.Errorf("metrics: a line holds 1 to %d values, got %d", maxMetrics, len(l.Values))
	}
	if len(l.Dimensions) > maxDimensions {
		return nil, fmt.Errorf("metrics: a line holds at most %d dimensions, got %d", maxDimensions, len(l.Dimensions))
	}
	if l.Time.IsZero() {
		return nil, errors.New("metrics: a time is required")
	}
	root := map[string]any{}
	used := func(name string) error {
		if name == "" {
			return errors.New("metrics: a name is required")
		}
		if _, dup := root[name]; dup || name == "_aws" {
			return fmt.Errorf("metrics: name %q used twice", name)
		}
		return nil
	}
	keys := make([]string, 0, len(l.Dimensions))
	for _, d := range l.Dimensions {
		if err := used(d.Name); err != nil {
			return nil, err
		}
		root[d.Name] = d.Value
		keys = append(keys, d.Name)
	}
	type definition struct {
		Name string `json:"Name"`
		Unit Unit   `json:"Unit"`
	}
	defs := make([]definition, 0, len(l.Values))
	for _, v := range l.Values {
		if err := used(v.Name); err != nil {
			return nil, err
		}
		if !units[v.Unit] {
			return nil, fmt.Errorf("metrics: %s: unknown unit %q", v.Name, v.Unit)
		}
		if v.Values != nil {
			if len(v.Values) == 0 || len(v.Values) > maxValues {
				return nil, fmt.Errorf("metrics: %s: an array holds 1 to %d values, got %d", v.Name, maxValues, len(v.Values))
			}
			for _, x := range v.Values {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return nil, fmt.Errorf("metrics: %s: %v is not a number CloudWatch accepts", v.Name, x)
				}
			}
			root[v.Name] = v.Values
		} else {
			if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
				return nil, fmt.Errorf("metrics: %s: %v is not a number CloudWatch accepts", v.Name, v.Value)
			}
			root[v.Name] = v.Value
		}
		defs = append(defs, definition{Name: v.Name, Unit: v.Unit})
	}
	type directive struct {
		Namespace  string       `json:"Namespace"`
		Dimensions [][]string   `json:"Dimensions"`
		Metrics    []definition `json:"Metrics"`
	}
	root["_aws"] = struct {
		Timestamp         int64       `json:"Timestamp"`
		CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
	}{
		Timestamp:         l.Time.UnixMilli(),
		CloudWatchMetrics: []directive{{Namespace: l.Namespace, Dimensions: [][]string{keys}, Metrics: defs}},
	}
	return json.Marshal(root)
}

// Write writes the line and a newline to w in one Write, so that lines written by concurrent
// writers to one stream (a log handler and this) do not interleave.
func (l Line) Write(w io.Writer) error {
	b, err := l.Encode()
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
