package source

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/charmbracelet/log"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// ProgressMode says how a long fetch reports progress.
type ProgressMode int

// The modes.
const (
	// ProgressAuto: bars when stderr is a terminal with a width and CI is unset, else lines.
	ProgressAuto ProgressMode = iota
	// ProgressBars: mpb bars on stderr.
	ProgressBars
	// ProgressLines: a log line through Options.Logger every few seconds.
	ProgressLines
	// ProgressOff: nothing.
	ProgressOff
)

// lineEvery is how often ProgressLines logs.
const lineEvery = 5 * time.Second

func resolveMode(m ProgressMode) ProgressMode {
	if m != ProgressAuto {
		return m
	}
	if os.Getenv("CI") != "" {
		return ProgressLines
	}
	ws, err := unix.IoctlGetWinsize(int(os.Stderr.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return ProgressLines
	}
	return ProgressBars
}

// meter follows one transfer: bytes of a download, objects of a git fetch.
type meter struct {
	name, unit string
	logger     *log.Logger
	cur, total atomic.Int64
	bar        *mpb.Bar
	p          *mpb.Progress
	stop       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

// newMeter starts reporting on name; unit is "B" for bytes or "objects". total ≤ 0 is
// unknown.
func newMeter(mode ProgressMode, logger *log.Logger, name, unit string, total int64) *meter {
	if mode == ProgressOff || mode == ProgressLines && logger == nil {
		mode, logger = ProgressOff, nil
	}
	m := &meter{name: name, unit: unit, logger: logger, stop: make(chan struct{})}
	m.total.Store(total)
	switch mode {
	case ProgressBars:
		counters := decor.CountersNoUnit("%d / %d objects")
		if unit == "B" {
			counters = decor.CountersKibiByte("% .1f / % .1f")
		}
		m.p = mpb.New(mpb.WithOutput(os.Stderr), mpb.WithWidth(40))
		// Made with total 0 and given its total after: mpb honours SetTotal (and so the
		// completion in done) only on bars made that way; others wait for current==total
		// and p.Wait would hang on a transfer that failed midway.
		m.bar = m.p.AddBar(0, mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
			mpb.AppendDecorators(counters))
		if total > 0 {
			m.bar.SetTotal(total, false)
		}
	case ProgressLines:
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			t := time.NewTicker(lineEvery)
			defer t.Stop()
			for {
				select {
				case <-m.stop:
					return
				case <-t.C:
					logger.Info("fetching", "source", name, "done", m.cur.Load(), "total", m.total.Load(), "unit", unit)
				}
			}
		}()
	}
	return m
}

// Write counts bytes, so a meter can sit in an io.MultiWriter.
func (m *meter) Write(b []byte) (int, error) {
	m.set(m.cur.Add(int64(len(b))), -1)
	return len(b), nil
}

// set records progress; total < 0 leaves the total as it is.
func (m *meter) set(cur, total int64) {
	m.cur.Store(cur)
	if total >= 0 {
		m.total.Store(total)
	}
	if m.bar != nil {
		if total >= 0 {
			m.bar.SetTotal(total, false)
		}
		m.bar.SetCurrent(cur)
	}
}

// done ends the report; safe to call more than once.
func (m *meter) done() {
	m.once.Do(func() {
		close(m.stop)
		m.wg.Wait()
		if m.bar != nil {
			m.bar.SetTotal(-1, true)
			m.p.Wait()
		}
		if m.logger != nil && m.bar == nil {
			// In lines mode a last line says what moved, so a CI log shows every transfer.
			m.logger.Info("fetched", "source", m.name, "done", m.cur.Load(), "unit", m.unit)
		}
	})
}
