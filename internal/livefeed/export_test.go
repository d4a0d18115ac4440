package livefeed

import "context"

// Count counts the subscribers as a poll does.
func (f *Feed) Count() int {
	_ = f.lock(context.Background())
	defer f.unlock()
	return f.count()
}

// Forget makes the next count walk the subscriptions.
func (f *Feed) Forget() {
	_ = f.lock(context.Background())
	defer f.unlock()
	f.walked = false
}
