package app

// GateKept is the gate's Kept: the requests of held ops it keeps in
// memory for their grants.
func (a *App) GateKept() (entries, bytes int) { return a.gate.Kept() }
