package events

// Subjects. Every subject carries the workspace so that subject mapping can
// partition by it. See docs/subjects.md.
const (
	// SubjectRoot is the root of every Airlock subject.
	SubjectRoot = "airlock.v1"
	// RequestSubjects matches every request subject.
	RequestSubjects = SubjectRoot + ".req.>"
	// OpSubjects matches every op subject.
	OpSubjects = SubjectRoot + ".op.>"
	// RejectedSubjects matches every rejection subject.
	RejectedSubjects = SubjectRoot + ".rejected.>"
	// WorkSubjects matches every work item subject.
	WorkSubjects = SubjectRoot + ".work.>"
	// QueryPrefix is the subject prefix of the query service's endpoints.
	QueryPrefix = SubjectRoot + ".q"
	// NoWorkspace stands for the workspace of a request whose own subject
	// names none that is valid. No valid name starts with '_'.
	NoWorkspace = "_"
)

// RequestSubject is where agent runtimes publish tool.requested events.
func RequestSubject(ws string) string { return SubjectRoot + ".req." + ws }

// OpSubject is the op's own subject: every transition of the op, appended
// with Nats-Expected-Last-Subject-Sequence.
func OpSubject(ws, op string) string { return SubjectRoot + ".op." + ws + "." + op }

// OpWorkspaceSubjects matches every op subject of one workspace.
func OpWorkspaceSubjects(ws string) string { return SubjectRoot + ".op." + ws + ".>" }

// RejectedSubject carries request.rejected events for a workspace, or for
// NoWorkspace.
func RejectedSubject(ws string) string { return SubjectRoot + ".rejected." + ws }

// WorkSubject carries work items for the executors of one tool.
func WorkSubject(ws, tool string) string { return SubjectRoot + ".work." + ws + "." + tool }

// ToolWorkSubjects matches the work items of one tool in every workspace.
func ToolWorkSubjects(tool string) string { return SubjectRoot + ".work.*." + tool }
