package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// pollInterval is how often the description file is read.
const pollInterval = 100 * time.Millisecond

// readDescription returns the trimmed content of the description file at
// path, which must not be empty.
func readDescription(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the description: %w", err)
	}
	d := strings.TrimSpace(string(data))
	if d == "" {
		return "", fmt.Errorf("reading the description: %s is empty", path)
	}
	return d, nil
}

// watchDescription reads the description file at path every interval
// until ctx ends, and calls apply with the new description whenever it
// differs from the last one (initially current). A read error or an empty
// file keeps the last description: a writer that truncates the file and
// then writes it is not seen as an empty description. Each such problem
// is logged once, until the file is good again.
func watchDescription(ctx context.Context, path, current string, interval time.Duration, apply func(string), log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := readDescription(path)
		if err != nil {
			if err.Error() != lastErr {
				log.Warn("keeping the append tool's description", "err", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if d != current {
			current = d
			apply(d)
		}
	}
}
