// Package livefeed keeps the ops stream's live feed (every stored message
// republished on airlock.v1.live.>, what `airlock watch` and a plain `nats
// sub` read) on while someone subscribes to it, and off otherwise.
//
// The server republishes each message it stores whether or not anyone
// listens, and that costs 5-8% of the pipeline's CPU per op (ADR 0013). On the embedded server a Feed in mode Auto counts the
// subscriptions whose subject overlaps airlock.v1.live.> in Airlock's
// account (a watcher in the clients' account counts through its import)
// every Poll, turns the feed on as soon as there is one, and off once
// there has been none for Hold. A subscriber that must not miss the first
// messages asks events.QueryLiveSubject after subscribing: the answer
// comes once the feed is on (Sync). With an external NATS, whose
// subscriptions Airlock cannot see, the mode is On: always on.
package livefeed
