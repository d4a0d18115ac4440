package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// store holds the two files the tools change: out, the lines appended, and
// calls, one line per call received. Its mutex serializes every effect, so
// concurrent calls neither interleave their writes nor miscount lines.
type store struct {
	mu    sync.Mutex
	out   string
	calls string
}

// appendLine records the call of tool, then appends line to out. It
// returns the number of lines in out afterwards.
func (s *store) appendLine(tool, line string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record(tool + " " + line); err != nil {
		return 0, err
	}
	if err := appendSynced(s.out, line+"\n"); err != nil {
		return 0, fmt.Errorf("appending to --out: %w", err)
	}
	return s.lines()
}

// peek records a call of peek and returns the number of lines in out.
func (s *store) peek() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record("peek"); err != nil {
		return 0, err
	}
	return s.lines()
}

// recordCall records a call of tool, for tools that have no other effect
// on the files.
func (s *store) recordCall(tool string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record(tool)
}

// record appends call and a newline to the calls file; s.mu must be held.
func (s *store) record(call string) error {
	if err := appendSynced(s.calls, call+"\n"); err != nil {
		return fmt.Errorf("recording the call in --calls: %w", err)
	}
	return nil
}

// lines counts the newlines in out (0 if out does not exist yet); s.mu
// must be held.
func (s *store) lines() (int, error) {
	n, err := countLines(s.out)
	if err != nil {
		return 0, fmt.Errorf("counting the lines of --out: %w", err)
	}
	return n, nil
}

// appendSynced appends data to the file at path, creating it if needed,
// and syncs it to disk before it returns.
func appendSynced(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(data)
	if err == nil {
		err = f.Sync()
	}
	// The errors of *os.File name the file already.
	return errors.Join(err, f.Close())
}

// countLines returns the number of newlines in the file at path, 0 if it
// does not exist.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	buf := make([]byte, 64*1024)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return 0, err
		}
	}
}
