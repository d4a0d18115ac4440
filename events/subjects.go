package events

import "strings"

// Subjects. Every subject carries the workspace so that subject mapping can
// partition by it. See docs/subjects.md.
const (
	// SubjectRoot is the root of every Airlock subject.
	SubjectRoot = "airlock.v1"
	// RequestSubjects matches every request subject.
	RequestSubjects = SubjectRoot + ".req.>"
	// OpSubjects matches every op event subject.
	OpSubjects = SubjectRoot + ".op.>"
	// RejectedSubjects matches every rejection subject.
	RejectedSubjects = SubjectRoot + ".rejected.>"
	// QueryPrefix is the subject prefix of the query service's endpoints.
	QueryPrefix = SubjectRoot + ".q"
	// NoWorkspace stands for the workspace of a request whose own subject
	// names none that is valid. No valid name starts with '_'.
	NoWorkspace = "_"
)

// RequestSubject is where agent runtimes publish tool.requested events.
func RequestSubject(ws string) string { return SubjectRoot + ".req." + ws }

// OpEventSubject is where one op event is appended:
// airlock.v1.op.<ws>.<op>.<tool>.<verb>. Every event of an op shares the
// prefix OpFilter names, and each is appended expecting the last sequence
// under that filter, so the op's events form one compare-and-swap chain.
func OpEventSubject(ws, op, tool string, t Type) string {
	return SubjectRoot + ".op." + ws + "." + op + "." + tool + "." + t.Short()
}

// OpFilter matches every event of one op.
func OpFilter(ws, op string) string { return SubjectRoot + ".op." + ws + "." + op + ".>" }

// ReadySubjects matches the decided events of one tool in every workspace:
// what the tool's executors consume.
func ReadySubjects(tool string) string { return SubjectRoot + ".op.*.*." + tool + ".decided" }

// RejectedSubject carries request.rejected events for a workspace, or for
// NoWorkspace.
func RejectedSubject(ws string) string { return SubjectRoot + ".rejected." + ws }

// OpSubjectParts splits an op event subject into its workspace, op id,
// tool and verb; ok is false for any other subject.
func OpSubjectParts(subject string) (ws, op, tool, verb string, ok bool) {
	rest, found := strings.CutPrefix(subject, SubjectRoot+".op.")
	if !found {
		return "", "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], parts[3], true
}
