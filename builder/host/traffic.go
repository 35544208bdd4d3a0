package host

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

type trafficCounter struct {
	rel  string // below /sys/class/infiniband/<dev>/ports/<n>/
	unit uint64 // bytes per count
}

// trafficCounters are read per port, in order of preference. port_xmit_data is the IB PMA
// counter PortXmitData, which counts octets divided by 4 (mlx5 reports it so, on RoCE
// too); EFA has no PMA and exposes tx_bytes (plain bytes) among its hw_counters.
func trafficCounters() []trafficCounter {
	return []trafficCounter{
		{"counters/port_xmit_data", 4},
		{"hw_counters/tx_bytes", 1},
	}
}

// saturated32 is where a 32-bit PMA counter stops (PMA counters saturate, they do not wrap).
const saturated32 = 1<<32 - 1

// NICTraffic is what one RDMA device sent during the sampled run.
type NICTraffic struct {
	Device    string  `json:"device"`
	Counters  string  `json:"counters"`   // the counter files summed, one per port
	UnitBytes uint64  `json:"unit_bytes"` // bytes per counter unit: 4 for port_xmit_data, 1 for tx_bytes
	Bytes     uint64  `json:"bytes"`
	Share     float64 `json:"share"` // of all bytes sent by every NIC
	Note      string  `json:"note,omitempty"`
}

// TrafficReport is how the bytes of a run spread over the NICs, with the
// host.traffic.spread check that judges it.
type TrafficReport struct {
	NICs       []NICTraffic `json:"nics"`
	TotalBytes uint64       `json:"total_bytes"`
	Check      check.Result `json:"check"`
}

type counterSample struct {
	path  string
	unit  uint64
	value uint64
}

// readCounters reads the transmit counter of every port of every RDMA device.
func readCounters(sys sysroot.Root) (map[string][]counterSample, []string, error) {
	devs, err := findIBDevices(sys)
	if err != nil {
		return nil, nil, err
	}
	out := map[string][]counterSample{}
	var names []string
	for _, d := range devs {
		for _, p := range d.Ports {
			for _, tc := range trafficCounters() {
				pth := fmt.Sprintf("%s/%s/ports/%d/%s", ibClassDir, d.Name, p.Num, tc.rel)
				s, err := sys.ReadString(pth)
				if err != nil {
					continue
				}
				v, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					return nil, nil, fmt.Errorf("read traffic counter %s: %q is not a count", pth, s)
				}
				if _, seen := out[d.Name]; !seen {
					names = append(names, d.Name)
				}
				out[d.Name] = append(out[d.Name], counterSample{path: pth, unit: tc.unit, value: v})
				break
			}
		}
	}
	return out, names, nil
}

// SampleTraffic reads every RDMA device's transmit counters, calls run, reads them again
// and reports how the bytes spread over the NICs. An error from run is returned with the
// report of what was sent until then.
func SampleTraffic(ctx context.Context, sys sysroot.Root, run func(context.Context) error) (TrafficReport, error) {
	before, _, err := readCounters(sys)
	if err != nil {
		return TrafficReport{}, fmt.Errorf("sample NIC traffic: before the run: %w", err)
	}
	runErr := run(ctx)
	after, names, err := readCounters(sys)
	if err != nil {
		return TrafficReport{}, fmt.Errorf("sample NIC traffic: after the run: %w", err)
	}
	rep := spread(before, after, names)
	if runErr != nil {
		return rep, fmt.Errorf("sample NIC traffic: the run failed: %w", runErr)
	}
	return rep, nil
}

func spread(before, after map[string][]counterSample, names []string) TrafficReport {
	var rep TrafficReport
	for _, name := range names {
		t := NICTraffic{Device: name}
		prev := map[string]uint64{}
		for _, s := range before[name] {
			prev[s.path] = s.value
		}
		var paths, notes []string
		for _, s := range after[name] {
			paths = append(paths, s.path)
			t.UnitBytes = s.unit
			b, ok := prev[s.path]
			switch {
			case !ok:
				notes = append(notes, s.path+" appeared during the run")
			case s.value < b:
				notes = append(notes, s.path+" went backwards (counter reset)")
			default:
				t.Bytes += (s.value - b) * s.unit
				if s.unit == 4 && s.value == saturated32 {
					notes = append(notes, s.path+" is saturated (32-bit PMA counter)")
				}
			}
		}
		t.Counters = strings.Join(paths, ",")
		t.Note = strings.Join(notes, "; ")
		rep.TotalBytes += t.Bytes
		rep.NICs = append(rep.NICs, t)
	}
	for i := range rep.NICs {
		if rep.TotalBytes > 0 {
			rep.NICs[i].Share = float64(rep.NICs[i].Bytes) / float64(rep.TotalBytes)
		}
	}
	rep.Check = judgeSpread(rep)
	return rep
}

// Thresholds: one NIC with more than 90% of the bytes of two or more means the mapping did
// not take (all GPUs on mlx5_0); a NIC below half or above twice its fair share is uneven.
const (
	dominantShare = 0.90
	unevenFactor  = 2.0
)

func judgeSpread(rep TrafficReport) check.Result {
	c := check.Result{ID: "host.traffic.spread", Why: "DeepEP should spread internode traffic over every NIC; all on one NIC " +
		"means the GPU→NIC mapping did not take (seen: every GPU on mlx5_0, 6.5 GB/s instead of 40+)"}
	ranked := append([]NICTraffic(nil), rep.NICs...)
	sort.SliceStable(ranked, func(i, j int) bool { return ranked[i].Bytes > ranked[j].Bytes })
	var parts []string
	var notes []string
	for _, t := range ranked {
		parts = append(parts, fmt.Sprintf("%s %d B (%.1f%%)", t.Device, t.Bytes, 100*t.Share))
		if t.Note != "" {
			notes = append(notes, t.Device+": "+t.Note)
		}
	}
	c.Read = fmt.Sprintf("%d B sent: %s", rep.TotalBytes, strings.Join(parts, ", "))
	if len(notes) > 0 {
		c.Read += "; " + strings.Join(notes, "; ")
	}
	n := len(rep.NICs)
	switch {
	case n < 2:
		return skip(c, c.Read+" (fewer than 2 NICs with counters)")
	case rep.TotalBytes == 0:
		return warn(c, c.Read, "no bytes moved over RDMA: run an internode test (the run may have used NVLink only)")
	case ranked[0].Share > dominantShare:
		return fail(c, c.Read, "set DEEP_EP_DEVICE_TO_HCA_MAPPING as host.pcie.gpu-nic-pairing prints it, and check that "+
			"the installed deep_ep/buffer.py calls _setup_device_hca_mapping (PR #466)")
	}
	fair := 1 / float64(n)
	for _, t := range ranked {
		if t.Share > unevenFactor*fair || t.Share < fair/unevenFactor {
			return warn(c, c.Read, "check DEEP_EP_DEVICE_TO_HCA_MAPPING covers every GPU with a distinct NIC")
		}
	}
	if len(notes) > 0 {
		return warn(c, c.Read, "")
	}
	c.Status = check.Pass
	return c
}
