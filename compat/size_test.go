package compat

import "testing"

// The examples are NVSHMEM's own (the NVSHMEM_SYMMETRIC_SIZE help text in
// src/include/host/env/env_defs.h of 3.4.5), and the values of the measurement.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"20m": 20971520, "3.1M": 3250586, "20kk": 20480, ".5m": 524288, "0.5m": 524288,
		"4294967296": 4294967296, "4G": 4294967296, "4GB": 4294967296, "1g": 1 << 30, "2T": 2 << 40,
		"1e3": 1000, " 7": 7, "+8K": 8192, "0": 0, "0x10": 16, "0x1G": 1 << 30,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1G", "four", "4 G", "4Q", "1e30T", "0xG"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
	if got := FormatSize(2146961792); got != "2146961792 (1.99 GiB)" {
		t.Errorf("FormatSize: %q", got)
	}
	if got := FormatSize(4 << 30); got != "4294967296 (4 GiB)" {
		t.Errorf("FormatSize: %q", got)
	}
}
