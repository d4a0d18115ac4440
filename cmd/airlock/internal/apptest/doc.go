// Package apptest is test support for the binary's own tests: a whole
// Airlock (the assembly in package app) started for one test, checked
// against the event schemas when it ends, and a client connected to it.
// Tests of the leaf libraries and the services use package testenv, which
// stops below the assembly.
package apptest
