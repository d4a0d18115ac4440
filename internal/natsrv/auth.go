package natsrv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// loadAuth sets the accounts and users of opts from the configuration file
// path.
func loadAuth(opts *server.Options, path string) error {
	fo, err := server.ProcessConfigFile(path)
	if err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	if len(fo.Accounts) == 0 || len(fo.Nkeys)+len(fo.Users) == 0 {
		return fmt.Errorf("auth file %s: no accounts or no users", path)
	}
	opts.Accounts, opts.Nkeys, opts.Users = fo.Accounts, fo.Nkeys, fo.Users
	return nil
}

// checkStore refuses a JetStream store whose streams belong to an account
// the server will not run JetStream in: streams of the global account
// (written with authentication off, or before Airlock had accounts) when
// there are accounts now, or streams of a configured account when there
// are none. The server would start with empty streams and leave the old
// ones on disk, unread. The store keeps each account's streams in
// <store>/jetstream/<account>/streams.
func checkStore(opts *server.Options) error {
	dir := filepath.Join(opts.StoreDir, server.JetStreamStoreDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var names []string
	for _, a := range opts.Accounts {
		names = append(names, a.Name)
	}
	for _, e := range entries {
		acc := e.Name()
		if !e.IsDir() || acc == server.DEFAULT_SYSTEM_ACCOUNT || !hasStreams(filepath.Join(dir, acc)) {
			continue
		}
		switch {
		case len(names) == 0 && acc != server.DEFAULT_GLOBAL_ACCOUNT:
			return fmt.Errorf("%s holds the streams of account %s, written with authentication on, "+
				"which a server without accounts would not read: start with authentication on, "+
				"or stop every process using the store and move the directory to %s (docs/authority.md)",
				filepath.Join(dir, acc), acc, filepath.Join(dir, server.DEFAULT_GLOBAL_ACCOUNT))
		case len(names) > 0 && !slices.Contains(names, acc):
			return fmt.Errorf("%s holds the streams of account %s, written with authentication off or before "+
				"Airlock had accounts, which a server with accounts %s would not read: "+
				"stop every process using the store and move the directory to %s/<the account with JetStream> "+
				"(docs/authority.md)",
				filepath.Join(dir, acc), acc, strings.Join(names, ", "), dir)
		}
	}
	return nil
}

func hasStreams(accDir string) bool {
	entries, err := os.ReadDir(filepath.Join(accDir, "streams"))
	return err == nil && len(entries) > 0
}
