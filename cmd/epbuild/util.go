package main

import (
	"errors"
	"fmt"
	"time"
)

func errorsAs[T any](err error, target *T) bool { return errors.As(err, target) }

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--older-than %q: use a Go duration such as 720h", s)
	}
	return d, nil
}

func timeNow() time.Time { return time.Now() }
