package authority

import (
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go"
)

// ConnectOption returns the option that authenticates a NATS connection
// with the user seed in credsPath, as Ensure writes it. The seed is read
// again at every (re)connect and not kept in memory.
func ConnectOption(credsPath string) (nats.Option, error) {
	opt, err := nats.NkeyOptionFromSeed(credsPath)
	if err != nil {
		return nil, fmt.Errorf("authority: creds %s: %w", credsPath, err)
	}
	return opt, nil
}

// Identify returns the principal a credential file belongs to, as the
// principals.json beside it lists it (the layout Ensure writes). ok is
// false when the file is no user seed or no list beside it names its key:
// a client may hold a credential without the data dir it came from.
func Identify(credsPath string) (p Principal, ok bool) {
	pub, err := readCreds(credsPath)
	if err != nil {
		return Principal{}, false
	}
	ps, found, err := readPrincipals(filepath.Dir(credsPath))
	if err != nil || !found {
		return Principal{}, false
	}
	for _, p := range ps {
		if p.PublicKey == pub {
			return p, true
		}
	}
	return Principal{}, false
}
