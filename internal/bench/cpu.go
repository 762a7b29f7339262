package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPU accounting from /proc (Linux), to tell where the time of a path goes when several processes
// share the machine's cores. Where /proc is not readable the figures are simply absent.

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux configuration
// that matters (it is fixed by the kernel ABI, whatever CONFIG_HZ is).
const clockTicks = 100

// cpuSeconds returns the user+system CPU time a process has used, or -1.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // fields 14 and 15 of stat: utime, stime
		return -1
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (u + st) / clockTicks
}

// findProcess returns the pid of a process with one of the names, or 0.
func findProcess(names ...string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		for _, n := range names {
			if strings.TrimSpace(string(comm)) == n {
				return pid
			}
		}
	}
	return 0
}

// cpuMeter measures the CPU time of a few processes over an interval.
type cpuMeter struct {
	names []string
	pids  []int
	start []float64
}

func newCPUMeter(procs map[string]int) *cpuMeter {
	m := &cpuMeter{}
	for _, name := range []string{"bench", "goaws", "database"} {
		if pid, ok := procs[name]; ok && pid > 0 && cpuSeconds(pid) >= 0 {
			m.names = append(m.names, name)
			m.pids = append(m.pids, pid)
		}
	}
	return m
}

func (m *cpuMeter) begin() {
	m.start = m.start[:0]
	for _, pid := range m.pids {
		m.start = append(m.start, cpuSeconds(pid))
	}
}

// end returns the CPU seconds each process used since begin.
func (m *cpuMeter) end() map[string]float64 {
	out := map[string]float64{}
	for i, pid := range m.pids {
		if c := cpuSeconds(pid); c >= 0 && i < len(m.start) {
			out[m.names[i]] = c - m.start[i]
		}
	}
	return out
}
