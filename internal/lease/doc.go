// Package lease tells whether a lease taken at a time still holds: whether
// surely less than its length has passed since, by every clock the
// system offers. Go's monotonic clock stops while a machine is suspended,
// so a lease measured with it alone would outlive its time in the world
// by the length of the sleep: a clock that counts suspend
// (CLOCK_BOOTTIME on Linux) and the wall clock are read too.
package lease
