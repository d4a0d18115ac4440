package authority

import (
	"fmt"

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
