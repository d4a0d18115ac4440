package remote

import (
	"fmt"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// Describe says where the call goes; the tool server alone knows its
// args, so the schema is any object.
func (r *Remote) Describe() executor.Description {
	return executor.Description{
		Text: fmt.Sprintf("Calls the tool server on NATS subject %s once with the args. "+
			"The call may be held until a person approves it; a call whose outcome is unknown ends ambiguous and is never sent again.", r.cfg.Subject),
		InputSchema: events.AnyObjectSchema,
	}
}
