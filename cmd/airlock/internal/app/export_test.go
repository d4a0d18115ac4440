package app

// GateKept is the gate's Kept: the requests of held ops it keeps in
// memory for their grants.
func (a *App) GateKept() (entries, bytes int) { return a.gate.Kept() }

// OpsFloor is the ops purger's Floor: every op event below it has left
// the ops stream.
func (a *App) OpsFloor() uint64 { return a.opsPurger.Floor() }
