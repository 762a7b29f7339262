package metrics_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/metrics"
	"github.com/stretchr/testify/require"
)

var at = time.Date(2026, 11, 22, 16, 15, 3, 696_814_573, time.UTC)

func sample() metrics.Line {
	return metrics.Line{
		Namespace:  "ExactlyOnce",
		Dimensions: []metrics.Dimension{{Name: "Function", Value: "sweeper"}},
		Time:       at,
		Values: []metrics.Value{
			{Name: "OldestPendingAgeSeconds", Unit: metrics.Seconds, Value: 12.5},
			{Name: "Settled", Unit: metrics.Count, Value: 3},
			{Name: "SweepErrors", Unit: metrics.Count, Value: 0},
		},
	}
}

// requireEMF checks a written line against the structure the EMF specification requires, reading
// it back as plain JSON: one JSON object on one line; _aws with Timestamp (milliseconds since the
// epoch) and CloudWatchMetrics, an array of directives each with exactly Namespace, Dimensions (an
// array of dimension sets, each an array of names) and Metrics (an array of {Name, Unit}); every
// dimension a top-level member with a string value, every metric a top-level member with a number.
// It returns the root object.
func requireEMF(t *testing.T, out []byte, when time.Time) map[string]any {
	t.Helper()
	require.True(t, bytes.HasSuffix(out, []byte("\n")), "a line ends with a newline")
	require.Equal(t, 1, bytes.Count(out, []byte("\n")), "one line")
	var root map[string]any
	require.NoError(t, json.Unmarshal(out, &root), "the line is one JSON object")

	aws, ok := root["_aws"].(map[string]any)
	require.True(t, ok, "_aws is an object: %v", root["_aws"])
	require.ElementsMatch(t, []string{"Timestamp", "CloudWatchMetrics"}, keys(aws))
	ts, ok := aws["Timestamp"].(float64)
	require.True(t, ok, "Timestamp is a number")
	require.Equal(t, float64(when.UnixMilli()), ts, "Timestamp in milliseconds since the epoch")

	directives, ok := aws["CloudWatchMetrics"].([]any)
	require.True(t, ok, "CloudWatchMetrics is an array")
	require.NotEmpty(t, directives)
	for _, raw := range directives {
		d, ok := raw.(map[string]any)
		require.True(t, ok, "a directive is an object")
		require.ElementsMatch(t, []string{"Namespace", "Dimensions", "Metrics"}, keys(d))
		ns, ok := d["Namespace"].(string)
		require.True(t, ok && ns != "", "Namespace is a non-empty string")
		sets, ok := d["Dimensions"].([]any)
		require.True(t, ok, "Dimensions is an array of dimension sets")
		for _, rawSet := range sets {
			set, ok := rawSet.([]any)
			require.True(t, ok, "a dimension set is an array")
			require.LessOrEqual(t, len(set), 30)
			for _, name := range set {
				n, ok := name.(string)
				require.True(t, ok, "a dimension set names dimensions with strings")
				_, isString := root[n].(string)
				require.True(t, isString, "dimension %q is a top-level member with a string value", n)
			}
		}
		defs, ok := d["Metrics"].([]any)
		require.True(t, ok, "Metrics is an array")
		require.NotEmpty(t, defs)
		require.LessOrEqual(t, len(defs), 100)
		for _, rawDef := range defs {
			def, ok := rawDef.(map[string]any)
			require.True(t, ok, "a metric definition is an object")
			require.Subset(t, []string{"Name", "Unit", "StorageResolution"}, keys(def))
			name, ok := def["Name"].(string)
			require.True(t, ok && name != "", "a metric has a Name")
			switch v := root[name].(type) {
			case float64:
			case []any:
				// The specification allows an array of up to 100 numbers.
				require.NotEmpty(t, v, "metric %q: an array of values", name)
				require.LessOrEqual(t, len(v), 100, "metric %q: at most 100 values", name)
				for _, x := range v {
					_, isNumber := x.(float64)
					require.True(t, isNumber, "metric %q: every value of its array is a number", name)
				}
			default:
				require.Failf(t, "not a number", "metric %q is a top-level member with a number value or an array of numbers: %v", name, v)
			}
		}
	}
	return root
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLineIsOneEMFObject(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, sample().Write(&buf))
	root := requireEMF(t, buf.Bytes(), at)

	// And exactly this document: the example of the package comment.
	require.JSONEq(t, `{
		"_aws": {
			"Timestamp": 1795364103696,
			"CloudWatchMetrics": [{
				"Namespace": "ExactlyOnce",
				"Dimensions": [["Function"]],
				"Metrics": [
					{"Name": "OldestPendingAgeSeconds", "Unit": "Seconds"},
					{"Name": "Settled", "Unit": "Count"},
					{"Name": "SweepErrors", "Unit": "Count"}
				]
			}]
		},
		"Function": "sweeper",
		"OldestPendingAgeSeconds": 12.5,
		"Settled": 3,
		"SweepErrors": 0
	}`, buf.String())
	require.Len(t, root, 5)
}

// A line without dimensions still has one (empty) dimension set: the metrics are published
// under the namespace alone.
func TestLineWithoutDimensions(t *testing.T) {
	l := sample()
	l.Dimensions = nil
	var buf bytes.Buffer
	require.NoError(t, l.Write(&buf))
	root := requireEMF(t, buf.Bytes(), at)
	sets := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"]
	require.Equal(t, []any{[]any{}}, sets)
}

func TestLineRefusesWhatCloudWatchWouldDrop(t *testing.T) {
	cases := map[string]func(l *metrics.Line){
		"no namespace":          func(l *metrics.Line) { l.Namespace = "" },
		"no values":             func(l *metrics.Line) { l.Values = nil },
		"no time":               func(l *metrics.Line) { l.Time = time.Time{} },
		"unknown unit":          func(l *metrics.Line) { l.Values[0].Unit = "Minutes" },
		"no unit":               func(l *metrics.Line) { l.Values[0].Unit = "" },
		"NaN":                   func(l *metrics.Line) { l.Values[0].Value = math.NaN() },
		"infinity":              func(l *metrics.Line) { l.Values[0].Value = math.Inf(1) },
		"a metric named twice":  func(l *metrics.Line) { l.Values[1].Name = l.Values[0].Name },
		"a dimension as metric": func(l *metrics.Line) { l.Values[0].Name = "Function" },
		"a metric named _aws":   func(l *metrics.Line) { l.Values[0].Name = "_aws" },
		"an empty metric name":  func(l *metrics.Line) { l.Values[0].Name = "" },
		"an empty array":        func(l *metrics.Line) { l.Values[0].Values = []float64{} },
		"101 values":            func(l *metrics.Line) { l.Values[0].Values = make([]float64, 101) },
		"NaN in an array":       func(l *metrics.Line) { l.Values[0].Values = []float64{1, math.NaN()} },
		"too many dimensions": func(l *metrics.Line) {
			for i := range 31 {
				l.Dimensions = append(l.Dimensions, metrics.Dimension{Name: "d" + strings.Repeat("x", i), Value: "v"})
			}
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			l := sample()
			breakIt(&l)
			var buf bytes.Buffer
			require.Error(t, l.Write(&buf))
			require.Zero(t, buf.Len(), "nothing is written")
		})
	}
}

// A metric with many values is an array of numbers, as the specification allows (each a datapoint
// to CloudWatch's statistics).
func TestLineWithAnArrayOfValues(t *testing.T) {
	l := sample()
	l.Values = append(l.Values, metrics.Value{Name: "TransactionDuration", Unit: metrics.Milliseconds, Values: []float64{1.5, 4, 2}})
	var buf bytes.Buffer
	require.NoError(t, l.Write(&buf))
	root := requireEMF(t, buf.Bytes(), at)
	require.Equal(t, []any{1.5, 4.0, 2.0}, root["TransactionDuration"])
}
