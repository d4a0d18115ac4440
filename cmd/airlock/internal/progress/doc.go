// Package progress draws a one-line progress report on a terminal: a
// label, a bar, done/total, percent, rate and ETA, redrawn in place with a
// carriage return at most ten times a second.
//
//	verify [=========>              ]  41207/100000  41%  12.3k/s  ETA 4.8s
//
// When the total is not known (zero or less) it draws a counter instead:
//
//	replay 41207  12.3k/s  elapsed 3.4s
//
// Finish draws the final line, with the average rate and the time taken,
// and ends it with a newline:
//
//	verify [========================] 100000/100000 100%  12.1k/s  in 8.3s
//
// # Quiet output
//
// A command draws only when Enabled says so: its stream is a terminal,
// TERM is not "dumb" and the command was not asked for JSON. Otherwise it
// keeps a nil *Reporter: every method of a nil Reporter does nothing, so
// the command's code reads the same either way and writes no byte.
//
// # Concurrency
//
// A Reporter is safe for concurrent use: Add from many goroutines costs
// an atomic add and a clock read, and only the goroutine that finds a
// redraw due takes the lock and writes.
package progress
