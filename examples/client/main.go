// Command client submits a tool request to Airlock as an agent, from
// outside Airlock's module, and prints its result: the one the runner
// replied with, or, on a retry, the one Airlock kept sealed to the agent's
// key.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS URL of Airlock")
	creds := flag.String("creds", "", "the agent's creds file")
	ws := flag.String("ws", "dev", "workspace")
	flag.Parse()

	b, err := os.ReadFile(*creds)
	if err != nil {
		log.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		log.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		log.Fatal(err)
	}
	agent := strings.TrimSuffix(filepath.Base(*creds), ".creds")
	opt, err := nats.NkeyOptionFromSeed(*creds)
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(*server, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := producers.New(nc, producers.WithAgentKey(seed), producers.WithWaitThroughHolds(), producers.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	out, err := c.Submit(context.Background(), events.Request{
		Workspace: *ws, Agent: agent, Tool: "exec", Args: json.RawMessage(`{"argv":["/bin/echo","hello"]}`),
	})
	switch {
	case errors.Is(err, events.ErrUnavailable):
		log.Fatalf("Airlock is not reachable at %s: %v", *server, err)
	case err != nil:
		log.Fatal(err)
	case out.Held():
		log.Fatalf("held for an approver: hold %s; grant it, then run this again", out.HoldID)
	case out.Pending:
		log.Fatal("no outcome yet: run this again to wait on (the same request is the same op)")
	case out.Result == nil && out.ResultCode != "":
		log.Fatalf("%s %s, result not available: %s", out.OpID, out.State, out.ResultCode)
	}
	fmt.Println(out.OpID, out.State, string(out.Result))
}
