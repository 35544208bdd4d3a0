package store

// ShortKey is a key as logs and reports show it: its first 12 hex digits.
func ShortKey(k string) string {
	if len(k) > 12 {
		return k[:12]
	}
	return k
}
