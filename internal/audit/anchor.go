package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CheckpointFile, in the data directory beside the projection, holds the
// newest checkpoint the projector signed (written at most once a
// checkpoint interval, and always at a clean stop). It is an anchor kept
// outside the projection: a projection put back from an older copy, or
// one that lost its WAL's tail to corruption, is shorter than the file
// says, and verification reports ROLLBACK even with no server to ask.
const CheckpointFile = "audit.checkpoint"

// WriteCheckpointFile replaces dir's checkpoint file with note, durably
// (a temporary file, synced, renamed over it, and the directory synced).
func WriteCheckpointFile(dir string, note []byte) error {
	path := filepath.Join(dir, CheckpointFile)
	f, err := os.CreateTemp(dir, "."+CheckpointFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("audit: checkpoint file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(note)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("audit: checkpoint file: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("audit: checkpoint file: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("audit: checkpoint file: sync %s: %w", dir, err)
	}
	return nil
}

// ReadCheckpointFile reads dir's checkpoint file; nil, nil when there is
// none (a data dir from before it was kept, or a new one). A file over
// MaxCheckpointBytes is an error: no checkpoint is that big.
func ReadCheckpointFile(dir string) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoint file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoint file: %w", err)
	}
	if len(b) > MaxCheckpointBytes {
		return nil, fmt.Errorf("audit: checkpoint file %s is over %d bytes: %w", filepath.Join(dir, CheckpointFile), MaxCheckpointBytes, ErrCorrupt)
	}
	return b, nil
}

// CheckpointFileTrusted is dir's checkpoint file as a Trusted anchor, if
// there is one.
func CheckpointFileTrusted(dir string) ([]Trusted, error) {
	b, err := ReadCheckpointFile(dir)
	if err != nil || b == nil {
		return nil, err
	}
	return []Trusted{{Name: "the data dir's " + CheckpointFile, Note: b}}, nil
}
