package events

// Class is a tool's capability class: what the policy decides on, and
// what an executor declares for its tool.
type Class string

// Capability classes, least to most dangerous.
const (
	ClassRead        Class = "read"
	ClassWrite       Class = "write"
	ClassExec        Class = "exec"
	ClassNetwork     Class = "network"
	ClassDestructive Class = "destructive"
)

// ParseClass returns the class named s; anything unknown is destructive.
func ParseClass(s string) Class {
	switch c := Class(s); c {
	case ClassRead, ClassWrite, ClassExec, ClassNetwork, ClassDestructive:
		return c
	}
	return ClassDestructive
}
