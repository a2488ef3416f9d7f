package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The relays share the machine with PostgreSQL, the broker and the bench's
// own receiver; on a small machine the drain rate is whatever they leave
// each other. cpuSample reads, from /proc, how much CPU each of them has
// used, so that a row can say where a drain's CPU went (Linux only; the
// line is left out elsewhere).

// cpuGroups are the columns of the CPU line, in order.
var cpuGroups = []string{"relay", "PostgreSQL", "broker", "bench", "other"}

// mysqlServerGroup is the MariaDB or MySQL server's processes, which the
// MariaDB section's consumer lines name.
const mysqlServerGroup = "mysqld"

type cpuSample struct {
	ok    bool
	at    time.Time
	procs map[int]procCPUTime // by process id, the processes of a group
	busy  time.Duration       // every CPU's non-idle time
}

type procCPUTime struct {
	grp string
	cpu time.Duration
}

// userHZ is the unit of the times in /proc: 100 per second on Linux.
const userHZ = 100

func sampleCPU(relayPIDs []int) cpuSample {
	s := cpuSample{at: time.Now(), procs: map[int]procCPUTime{}}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line)) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		s.busy += ticks(n)
	}
	relays := map[int]bool{}
	for _, p := range relayPIDs {
		relays[p] = true
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		comm, cpu, ok := procCPU(dir)
		if !ok {
			continue
		}
		grp := ""
		switch {
		case relays[pid]:
			grp = "relay"
		case pid == os.Getpid():
			grp = "bench"
		case comm == "postgres":
			grp = "PostgreSQL"
		case strings.HasPrefix(comm, "nats-server"):
			grp = "broker"
		case comm == "mariadbd" || comm == "mysqld":
			grp = mysqlServerGroup // not a column of the CPU line: its "other"
		}
		if grp != "" {
			s.procs[pid] = procCPUTime{grp: grp, cpu: cpu}
		}
	}
	s.ok = true
	return s
}

// procCPU reads a process's name and user+system time from its stat file.
func procCPU(dir string) (comm string, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return "", 0, false
	}
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return "", 0, false
	}
	rest := strings.Fields(string(b[close+1:])) // state is field 3; utime, stime are 14, 15
	if len(rest) < 13 {
		return "", 0, false
	}
	utime, _ := strconv.ParseInt(rest[11], 10, 64)
	stime, _ := strconv.ParseInt(rest[12], 10, 64)
	return string(b[open+1 : close]), ticks(utime + stime), true
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// cpuPerEvent describes the CPU used between from and to per event, by
// group, and how busy the machine was: "relay 35µs, PostgreSQL 23µs, …".
func cpuPerEvent(from, to cpuSample, events, cpus int) string {
	if !from.ok || !to.ok || events == 0 {
		return ""
	}
	var parts []string
	var known time.Duration
	for _, g := range cpuGroups[:len(cpuGroups)-1] {
		d := groupCPU(from, to, g)
		known += d
		parts = append(parts, fmt.Sprintf("%s %s", g, usPerEvent(d, events)))
	}
	busy := to.busy - from.busy
	parts = append(parts, fmt.Sprintf("other %s", usPerEvent(max(0, busy-known), events)))
	wall := to.at.Sub(from.at)
	load := 0.0
	if wall > 0 {
		load = 100 * float64(busy) / float64(wall) / float64(cpus)
	}
	return fmt.Sprintf("%s; machine %.0f%% busy", strings.Join(parts, ", "), load)
}

func usPerEvent(d time.Duration, events int) string {
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)/float64(events))
}

// groupPerEvent is the CPU group g used between from and to per event, or
// "-" when it could not be read.
func groupPerEvent(from, to cpuSample, g string, events int) string {
	if !from.ok || !to.ok || events == 0 {
		return "-"
	}
	return usPerEvent(groupCPU(from, to, g), events)
}

// groupCPU is the CPU group g used between from and to, process by
// process: a process present at both samples counts its difference, one
// started since counts all its time. A process that ended meanwhile (a
// PostgreSQL backend of another client, say) is left out rather than
// subtracted, as a difference of the group's totals would.
func groupCPU(from, to cpuSample, g string) time.Duration {
	var d time.Duration
	for pid, p := range to.procs {
		if p.grp != g {
			continue
		}
		if before, ok := from.procs[pid]; ok && before.grp == g {
			d += max(0, p.cpu-before.cpu)
		} else {
			d += p.cpu
		}
	}
	return d
}
