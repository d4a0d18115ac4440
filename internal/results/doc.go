// Package results keeps completed ops' results for the agents that asked
// (ADR 0018): sealed to the agent's key (internal/seal) and stored in
// AIRLOCK_RESULTS, one message per attempt, until the op's retention
// ends. The runner keeps them (Keep, before the completed event); the
// gate's answer to a retry and the query service's result endpoint read
// them (Get); the eraser removes them (Erase).
package results
