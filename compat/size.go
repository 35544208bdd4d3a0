package compat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a size as NVSHMEM reads NVSHMEM_SYMMETRIC_SIZE and its other size
// variables (nvshmemi_atol_scaled, src/include/bootstrap_host_transport/env_defs_internal.h
// in 3.4.5, which scans it with sscanf's %lf): a non-negative number (decimal, or a
// hexadecimal integer), then optionally one of k, m, g, t (either
// case: powers of 1024) after which anything is ignored, rounded up to a whole byte.
// "4G" and "4294967296" are 4 GiB, "1.5g" is 1610612736, "20kk" is 20 KiB. Anything else
// is an error, as it is to NVSHMEM, whose initialisation then fails.
func ParseSize(s string) (uint64, error) {
	// the length of the longest decimal number (digits, one '.', an exponent) s starts with
	n, digits := 0, 0
	t := strings.TrimLeft(s, " \t\n\v\f\r") // %lf skips leading white space
	if strings.HasPrefix(t, "+") {
		n++
	}
	if h, ok := strings.CutPrefix(t[n:], "0x"); ok || strings.HasPrefix(t[n:], "0X") {
		// %lf reads a hexadecimal number too; an integer is all a size needs
		if !ok {
			h = t[n+2:]
		}
		m := 0
		for m < len(h) && strings.IndexByte("0123456789abcdefABCDEF", h[m]) >= 0 {
			m++
		}
		if m > 0 {
			v, err := strconv.ParseUint(h[:m], 16, 64)
			if err != nil {
				return 0, fmt.Errorf("size %q: %w", s, err)
			}
			return scaleSize(s, float64(v), h[m:])
		}
	}
	for n < len(t) && t[n] >= '0' && t[n] <= '9' {
		n++
		digits++
	}
	if n < len(t) && t[n] == '.' {
		n++
		for n < len(t) && t[n] >= '0' && t[n] <= '9' {
			n++
			digits++
		}
	}
	if digits == 0 {
		return 0, fmt.Errorf("size %q: not a number (a size is a number of bytes with an optional k, m, g or t suffix)", s)
	}
	if n < len(t) && (t[n] == 'e' || t[n] == 'E') {
		m := n + 1
		if m < len(t) && (t[m] == '+' || t[m] == '-') {
			m++
		}
		if m < len(t) && t[m] >= '0' && t[m] <= '9' {
			for m < len(t) && t[m] >= '0' && t[m] <= '9' {
				m++
			}
			n = m
		}
	}
	p, err := strconv.ParseFloat(t[:n], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return scaleSize(s, p, t[n:])
}

// scaleSize applies the suffix that follows a size's number (only its first letter counts).
func scaleSize(s string, p float64, suffix string) (uint64, error) {
	scale := 0
	if suffix != "" {
		switch suffix[0] {
		case 'k', 'K':
			scale = 10
		case 'm', 'M':
			scale = 20
		case 'g', 'G':
			scale = 30
		case 't', 'T':
			scale = 40
		default:
			return 0, fmt.Errorf("size %q: unknown suffix %q (k, m, g or t)", s, suffix)
		}
	}
	v := math.Ceil(p * float64(uint64(1)<<scale))
	if v >= math.Exp2(64) {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return uint64(v), nil
}

// FormatSize writes a byte count for a reader: "4294967296 (4 GiB)"; the fraction is cut,
// never rounded up ("2146961792 (1.99 GiB)").
func FormatSize(n uint64) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			v := float64(n) / float64(uint64(1)<<u.shift)
			if v == math.Trunc(v) {
				return fmt.Sprintf("%d (%d %s)", n, uint64(v), u.name)
			}
			return fmt.Sprintf("%d (%.2f %s)", n, math.Floor(v*100)/100, u.name)
		}
	}
	return strconv.FormatUint(n, 10)
}
