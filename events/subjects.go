package events

import (
	"slices"
	"strings"
)

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
	// SysSubjects matches the records of controls and policy changes.
	SysSubjects = SubjectRoot + ".sys.>"
	// ModeSubjects matches every workspace's mode controls.
	ModeSubjects = SubjectRoot + ".sys.mode.>"
	// PolicySubject records each policy a gate loads.
	PolicySubject = SubjectRoot + ".sys.policy"
	// ResolveSubjects and ControlSubjects match every resolution and
	// control command.
	ResolveSubjects = SubjectRoot + ".resolve.*.*"
	ControlSubjects = SubjectRoot + ".ctl.*.*"
	// LivePrefix is where the server republishes every message of
	// AIRLOCK_OPS once stored: airlock.v1.live.<the subject after
	// airlock.v1.>, with the stream's Nats-Stream, Nats-Subject,
	// Nats-Sequence, Nats-Time-Stamp and Nats-Last-Sequence headers.
	// Watchers subscribe there: what they see was stored, never a publish
	// the stream refused (a compare-and-swap that lost).
	LivePrefix = SubjectRoot + ".live."
	// LiveSubjects matches every republished message.
	LiveSubjects = LivePrefix + ">"
	// QueryPrefix is the subject prefix of the query service's endpoints.
	QueryPrefix = SubjectRoot + ".q"
	// NoWorkspace stands for the workspace of a request whose own subject
	// names none that is valid. No valid name starts with '_'.
	NoWorkspace = "_"
)

// RequestSubject is where agent runtimes publish tool.requested events:
// airlock.v1.req.<ws>.<agent>. The agent token is the principal
// publishing: with credentials on, the server lets an agent publish only
// under its own name, and the gate refuses a request whose body names
// another agent or workspace than its subject.
func RequestSubject(ws, agent string) string { return SubjectRoot + ".req." + ws + "." + agent }

// HeldSubject is where AIRLOCK_HELD keeps the request of held op op: a
// copy taken out of AIRLOCK_REQUESTS, so that a hold, which may last
// hours, does not keep the blocks of other ops' requests on disk.
func HeldSubject(op string) string { return SubjectRoot + ".held." + op }

// HeldSubjects are the subjects of AIRLOCK_HELD.
const HeldSubjects = SubjectRoot + ".held.>"

// ArchiveSubject is the subject of AIRLOCK_ARCHIVE's segments, each a copy
// of a contiguous range of AIRLOCK_OPS (internal/archive, ADR 0026), and
// ArchiveFloorSubject that of its floors: before ended ops' events leave
// AIRLOCK_OPS below a sequence, that sequence is stored there.
const (
	ArchiveSubject      = SubjectRoot + ".archive"
	ArchiveFloorSubject = SubjectRoot + ".archive.floor"
)

// LiveSubject is the subject AIRLOCK_OPS republishes a message stored on
// subject to (see LivePrefix).
func LiveSubject(subject string) string {
	return LivePrefix + strings.TrimPrefix(subject, SubjectRoot+".")
}

// WorkspaceRequests matches every request of one workspace.
func WorkspaceRequests(ws string) string { return SubjectRoot + ".req." + ws + ".>" }

// RequestSubjectParts splits a request subject into its workspace and
// agent; ok is false unless the subject is airlock.v1.req.<ws>.<agent>
// with valid names.
func RequestSubjectParts(subject string) (ws, agent string, ok bool) {
	ws, agent, ok = SplitRequestSubject(subject)
	if !ok || !ValidName(ws) || !ValidName(agent) {
		return "", "", false
	}
	return ws, agent, true
}

// SplitRequestSubject is the one parser of request subjects: the two
// tokens after airlock.v1.req., whatever they hold; ok is false for a
// subject of another shape. RequestSubjectParts also checks the names.
func SplitRequestSubject(subject string) (ws, agent string, ok bool) {
	rest, found := strings.CutPrefix(subject, SubjectRoot+".req.")
	if !found {
		return "", "", false
	}
	ws, agent, found = strings.Cut(rest, ".")
	if !found || ws == "" || agent == "" || strings.IndexByte(agent, '.') >= 0 {
		return "", "", false
	}
	return ws, agent, true
}

// ReplyPrefix starts every Airlock-Reply-To subject of an agent:
// airlock.v1.reply.<agent>. Airlock answers a request only there, and the
// server lets only that agent subscribe to it.
func ReplyPrefix(agent string) string { return SubjectRoot + ".reply." + agent + "." }

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
func ReadySubjects(tool string) string { return ReadySubject("*", tool) }

// ReadySubject matches the decided events of one tool in workspace ws
// ("*" for every workspace).
func ReadySubject(ws, tool string) string {
	return SubjectRoot + ".op." + ws + ".*." + tool + ".decided"
}

// ReadySubjectsOf is what the executors of tool that serve workspaces
// (nil: every workspace) consume, sorted.
func ReadySubjectsOf(tool string, workspaces []string) []string {
	if workspaces == nil {
		return []string{ReadySubjects(tool)}
	}
	out := make([]string, 0, len(workspaces))
	for _, ws := range workspaces {
		out = append(out, ReadySubject(ws, tool))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReadyFilterServes reports whether filter, a consumer's filter subject,
// takes the decided events of tool in workspace ws: "*" or ws in the
// workspace token, "*" or tool in the tool token, the op token a
// wildcard, and nothing else.
func ReadyFilterServes(filter, ws, tool string) bool {
	t := strings.Split(filter, ".")
	if len(t) != 7 || t[0]+"."+t[1] != SubjectRoot || t[2] != "op" || t[6] != "decided" {
		return false
	}
	return (t[3] == "*" || t[3] == ws) && t[4] == "*" && (t[5] == "*" || t[5] == tool)
}

// GrantedSubjects matches every granted event: the gate's resume work.
const GrantedSubjects = SubjectRoot + ".op.*.*.*.granted"

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
	// Four tokens, cut one by one: this runs for every op event.
	ws, rest, ok1 := strings.Cut(rest, ".")
	op, rest, ok2 := strings.Cut(rest, ".")
	tool, verb, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 || strings.Contains(verb, ".") {
		return "", "", "", "", false
	}
	return ws, op, tool, verb, true
}

// ModeSubject records the mode controls of one workspace.
func ModeSubject(ws string) string { return SubjectRoot + ".sys.mode." + ws }

// ResolveSubject is where the principal named publishes resolutions of
// the workspace's holds: airlock.v1.resolve.<ws>.<principal>. The
// server's permissions let a principal publish only under its own name.
func ResolveSubject(ws, principal string) string {
	return SubjectRoot + ".resolve." + ws + "." + principal
}

// ControlSubject is where the principal named publishes controls of the
// workspace: airlock.v1.ctl.<ws>.<principal>.
func ControlSubject(ws, principal string) string {
	return SubjectRoot + ".ctl." + ws + "." + principal
}

// CommandSubjectParts splits a resolve or control subject into its
// workspace and principal; ok is false unless both are valid names.
func CommandSubjectParts(subject string) (ws, principal string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0]+"."+parts[1] != SubjectRoot || (parts[2] != "resolve" && parts[2] != "ctl") {
		return "", "", false
	}
	if !ValidName(parts[3]) || !ValidName(parts[4]) {
		return "", "", false
	}
	return parts[3], parts[4], true
}
