package source

import (
	"testing"
	"time"
)

// A transfer that stops short of its announced size (a failed download) must still end
// its progress bar: mpb waits forever on a bar that never completes.
func TestMeterDoneAfterShortTransfer(t *testing.T) {
	for _, mode := range []ProgressMode{ProgressBars, ProgressLines, ProgressOff} {
		finished := make(chan struct{})
		go func() {
			m := newMeter(mode, nil, "x", "B", 100)
			m.Write(make([]byte, 50))
			m.done()
			m.done()
			close(finished)
		}()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("mode %d: done() did not return", mode)
		}
	}
}
