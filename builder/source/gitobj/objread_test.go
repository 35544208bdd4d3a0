package gitobj

import "testing"

// TestApplyDelta checks delta decoding against hand-made deltas, and that malformed ones
// fail instead of panicking.
func TestApplyDelta(t *testing.T) {
	base := []byte("0123456789abcdefghij")
	// src size 20, target size 9: copy 4 bytes at offset 10, insert "XYZ", copy 2 at 0.
	delta := []byte{20, 9, 0x80 | 0x01 | 0x10, 10, 4, 3, 'X', 'Y', 'Z', 0x80 | 0x10, 2}
	got, err := applyDelta(nil, base, delta)
	if err != nil || string(got) != "abcdXYZ01" {
		t.Fatalf("applyDelta = %q, %v", got, err)
	}
	for _, bad := range [][]byte{
		{},
		{21, 9, 0x90, 4},                   // wrong source size
		{20, 9, 0x80 | 0x01 | 0x10, 18, 4}, // copy past the base
		{20, 2, 3, 'a', 'b', 'c'},          // more than the target size
		{20, 4, 3, 'a', 'b', 'c'},          // less than the target size
		{20, 1, 0},                         // reserved command
		{20, 1, 5, 'a'},                    // insert past the delta's end
	} {
		if _, err := applyDelta(nil, base, bad); err == nil {
			t.Errorf("applyDelta(%v) succeeded", bad)
		}
	}
}
