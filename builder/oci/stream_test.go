package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// The download's readers each get every byte once, in order, while buffers are reused
// under them (tiny buffers, two in flight): one hashes through WriteTo, one reads a few
// bytes at a time, one stops early and drains, as the check does when it refuses an
// archive. The file gets every byte too.
func TestFanOutReadersSeeEveryByte(t *testing.T) {
	data := make([]byte, 100_003)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(data)
	fan := newFanOut(3, 1000, 2)
	var hashed, read []byte
	done := make(chan error, 3)
	go func() {
		h := sha256.New()
		_, err := io.Copy(h, fan.reader(0))
		hashed = h.Sum(nil)
		done <- err
	}()
	go func() {
		var err error
		read, err = io.ReadAll(iotest.OneByteReader(fan.reader(1)))
		done <- err
	}()
	go func() {
		r := fan.reader(2)
		_, err := io.ReadFull(r, make([]byte, 10))
		r.drain()
		done <- err
	}()
	var file bytes.Buffer
	err := download(context.Background(), bytes.NewReader(data), &file, fan, int64(len(data)))
	fan.close(err)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	want := sha256.Sum256(data)
	switch {
	case !bytes.Equal(file.Bytes(), data):
		t.Error("the file differs from the stream")
	case !bytes.Equal(hashed, want[:]):
		t.Error("the hashing reader saw other bytes")
	case !bytes.Equal(read, data):
		t.Error("the reading reader saw other bytes")
	case fan.made > 2:
		t.Errorf("%d buffers made, at most 2 may be", fan.made)
	}
}

// A stream shorter or longer than its descriptor's size, or one that fails, is an
// error for the download and for every reader.
func TestDownloadSizeAndErrors(t *testing.T) {
	data := bytes.Repeat([]byte("epbuild "), 1000)
	boom := errors.New("connection reset")
	for _, c := range []struct {
		name string
		r    io.Reader
		size int64
		want error
	}{
		{"short", bytes.NewReader(data), int64(len(data)) + 1, io.ErrUnexpectedEOF},
		{"long", bytes.NewReader(data), int64(len(data)) - 1, content.ErrTrailingData},
		{"failing", io.MultiReader(bytes.NewReader(data[:5000]), iotest.ErrReader(boom)), int64(len(data)), boom},
	} {
		t.Run(c.name, func(t *testing.T) {
			fan := newFanOut(1, 1024, 2)
			got := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, fan.reader(0))
				got <- err
			}()
			err := download(context.Background(), c.r, io.Discard, fan, c.size)
			fan.close(err)
			if !errors.Is(err, c.want) {
				t.Errorf("download: %v, want %v", err, c.want)
			}
			if err := <-got; !errors.Is(err, c.want) {
				t.Errorf("reader: %v, want %v", err, c.want)
			}
		})
	}
}

// A failed write of the file is ours, named as a write, not the registry's.
func TestDownloadWriteError(t *testing.T) {
	fan := newFanOut(1, 1024, 2)
	go fan.reader(0).drain()
	full := errors.New("no space left on device")
	err := download(context.Background(), bytes.NewReader(make([]byte, 5000)), failWriter{full}, fan, 5000)
	fan.close(err)
	var we *writeError
	if !errors.As(err, &we) || !errors.Is(err, full) {
		t.Fatalf("download to a full disk: %v", err)
	}
	if e := blobError(Ref{Registry: "127.0.0.1:5000", Repository: "r"}, "x.tar.zst", ocispec.Descriptor{Digest: digest.FromString("x"), Size: 5000}, err); !errors.Is(e, full) || exitCode(e) == 2 {
		t.Errorf("explained as %v (exit %d)", e, exitCode(e))
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }
