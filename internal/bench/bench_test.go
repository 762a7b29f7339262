package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The JSON is what CI and people read: every row has name, value and unit, and a ratio names its
// reference; targets are judged in full mode only; a ratio without a reference is null, not NaN.
func TestReportJSONShape(t *testing.T) {
	t.Parallel()
	for _, mode := range []Mode{Full, Smoke} {
		r := &run{cfg: Config{Mode: mode, Progress: &bytes.Buffer{}}, report: &Report{Mode: mode}, start: time.Now()}
		ref := Row{Group: "g", Name: "ref_eps", Value: 1000, Unit: "events/s"}
		num := Row{Group: "g", Name: "num_eps", Value: 950, Unit: "events/s"}
		r.add(ref, num, ratio("g", "num_ratio", num, ref, atLeast(0.9), ""),
			ratio("g", "broken_ratio", num, Row{Name: "zero"}, atLeast(0.9), ""))
		var buf bytes.Buffer
		require.NoError(t, r.report.WriteJSON(&buf))
		var out struct {
			Rows []map[string]any `json:"rows"`
		}
		require.NoError(t, json.Unmarshal(buf.Bytes(), &out))
		require.Len(t, out.Rows, 4)
		for _, row := range out.Rows {
			require.Contains(t, row, "name")
			require.Contains(t, row, "value")
			require.Contains(t, row, "unit")
		}
		ratioRow := out.Rows[2]
		require.Equal(t, "num_ratio", ratioRow["name"])
		require.Equal(t, "ref_eps", ratioRow["reference"])
		require.InDelta(t, 0.95, ratioRow["value"], 1e-9)
		require.Equal(t, ">= 0.9", ratioRow["target"])
		if mode == Full {
			require.Equal(t, true, ratioRow["met"])
			require.Equal(t, false, out.Rows[3]["met"], "a ratio with no reference is not met")
		} else {
			require.NotContains(t, ratioRow, "met", "smoke judges no target")
		}
		require.Nil(t, out.Rows[3]["value"])
		var table, md bytes.Buffer
		require.NoError(t, r.report.WriteTable(&table))
		require.Contains(t, table.String(), "num_ratio")
		require.NoError(t, r.report.WriteMarkdown(&md))
		require.Contains(t, md.String(), "| g | `num_ratio` | 0.95 | x | ref_eps (1,000) | >= 0.9 |")
	}
}

func TestPercentileAndRounding(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(ds, 50))
	require.Equal(t, 99*time.Millisecond, percentile(ds, 99))
	require.Equal(t, 100*time.Millisecond, percentile(ds, 100))
	require.Zero(t, percentile(nil, 50))
	require.Equal(t, 12350.0, round(12345.678))
	require.Equal(t, 0.9512, round(0.951234))
	require.True(t, math.IsNaN(round(math.NaN())))
	require.Equal(t, "12,346", format(12345.678))
}

// The meter charges a process's CPU to it and the rest of the machine's busy time to "other": a
// window in which this process spins shows this process busy, whatever the rest of the machine does.
func TestCPUMeterChargesTheSpinningProcess(t *testing.T) {
	if cpuSeconds(os.Getpid()) < 0 {
		t.Skip("no /proc here: the meter reports nothing, and the benchmark omits CPU figures")
	}
	m := newCPUMeter(map[string]int{"bench": os.Getpid()})
	m.begin()
	start := time.Now()
	for cpuSeconds(os.Getpid())-m.start[0] < 0.3 { // spin until the kernel has charged 0.3 s
		for i := 0; i < 1e6; i++ {
			spinSink += i
		}
	}
	used := m.end()
	require.GreaterOrEqual(t, used["bench"], 0.3)
	require.Contains(t, used, "other")
	require.Contains(t, used, "steal")
	require.GreaterOrEqual(t, used["other"], 0.0)
	require.GreaterOrEqual(t, used["steal"], 0.0)
	s := cpuSummary(used, time.Since(start))
	require.Regexp(t, `^cores: bench \d+\.\d\d other \d+\.\d\d steal \d+\.\d\d$`, s)
}

var spinSink int

// The tasks group's receiver fails the order check when a reference's task is attempted before the
// task ahead of it was delivered, answers a failing reference's first attempts with 503, and counts
// a second delivery of a task as a duplicate.
func TestTaskReceiverCatchesOutOfOrderDeliveries(t *testing.T) {
	t.Parallel()
	recv := newTaskReceiver(0)
	defer recv.close()
	spec := taskSpec{name: "t", refs: 2, perRef: 3, ordered: true, failEvery: 2} // reference 1 fails
	rr := recv.begin(7, spec)
	post := func(ref, seq int) int {
		b, _ := json.Marshal(taskPayload{Tag: 7, Ref: ref, Seq: seq})
		resp, err := http.Post(recv.srv.URL, "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post(0, 0))
	require.Equal(t, http.StatusOK, post(0, 1))
	require.Zero(t, rr.check.outOfOrder)
	require.Equal(t, http.StatusServiceUnavailable, post(1, 0))
	require.Equal(t, http.StatusServiceUnavailable, post(1, 0))
	require.Equal(t, http.StatusServiceUnavailable, post(1, 2)) // task 2 before tasks 0 and 1
	require.Equal(t, 1, rr.check.outOfOrder)
	require.Contains(t, rr.check.firstViolation, "reference 1: task 2 attempted while task 0 was not delivered")
	require.Equal(t, http.StatusOK, post(0, 1))
	require.Equal(t, 1, rr.check.duplicates)
	require.Equal(t, http.StatusOK, post(1, 0)) // its third attempt
	for seq := 1; seq <= 2; seq++ {
		for post(1, seq) != http.StatusOK {
		}
	}
	require.Equal(t, http.StatusOK, post(0, 2))
	<-rr.done
	require.Equal(t, 1, rr.check.outOfOrder)
	require.Equal(t, 6, rr.check.failed)
}
