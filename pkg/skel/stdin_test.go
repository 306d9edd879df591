package skel

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestReadFD reads real pipes: written and closed before the read (the
// writer has hung up: no poll after the first), written in pieces, larger
// than the first buffer, too large, and never closed.
func TestReadFD(t *testing.T) {
	big := strings.Repeat("x", 5000)
	tests := []struct {
		name   string
		pieces []string
		open   bool   // the writer never closes
		err    string // "" for success
	}{
		{"closed before the read", []string{`{"a":1}`}, false, ""},
		{"in pieces", []string{`{"a":`, `1}`, "\n"}, false, ""},
		{"larger than the buffer", []string{big[:1000], big[1000:3000], big[3000:]}, false, ""},
		{"empty", nil, false, ""},
		{"too large", []string{strings.Repeat("y", maxConfigSize+1)}, false, "larger than"},
		{"never closed", []string{`{"a":1}`}, true, "no end of input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			go func() {
				for i, p := range tt.pieces {
					if i > 0 {
						time.Sleep(20 * time.Millisecond)
					}
					if _, err := w.WriteString(p); err != nil {
						break
					}
				}
				if !tt.open {
					w.Close()
				}
			}()
			defer w.Close()
			if len(tt.pieces) == 1 && !tt.open && tt.err == "" {
				time.Sleep(20 * time.Millisecond) // let the writer hang up first
			}
			bound := 10 * time.Second
			if tt.open {
				bound = 200 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			got, err := readFD(ctx, int(r.Fd()))
			switch {
			case tt.err == "" && err != nil:
				t.Fatal(err)
			case tt.err == "" && !bytes.Equal(got, []byte(strings.Join(tt.pieces, ""))):
				t.Fatalf("read %d bytes %.40q, want %d", len(got), got, len(strings.Join(tt.pieces, "")))
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want %q", err, tt.err)
			}
		})
	}
}
