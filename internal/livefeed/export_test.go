package livefeed

// Count counts the subscribers as a poll does.
func (f *Feed) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count()
}

// Forget makes the next count walk the subscriptions.
func (f *Feed) Forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.walked = false
}
