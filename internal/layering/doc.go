// Package layering holds no code: its tests check the module's shape, as
// docs/architecture.md draws it. Every import arrow of product code points
// down the layers (events, then internal leaf libraries, then the
// services and the client, then the binary), and no exported declaration
// of a public package names an internal type, so that a module outside
// this one can use them all.
package layering
