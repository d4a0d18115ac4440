package events

import (
	"errors"
	"fmt"
)

// Code is a stable error code. Codes are API: they are listed in
// docs/errors.md and never renamed.
type Code string

// Error codes returned to submitters, approvers and operators.
const (
	// Bad input.
	CodeInvalidEvent          Code = "INVALID_EVENT"
	CodeUnknownEventType      Code = "UNKNOWN_EVENT_TYPE"
	CodeRequestTooLarge       Code = "REQUEST_TOO_LARGE"
	CodeArgsTooLarge          Code = "ARGS_TOO_LARGE"
	CodeInvalidArgs           Code = "INVALID_ARGS"
	CodeInvalidName           Code = "INVALID_NAME"
	CodeInvalidIdempotencyKey Code = "INVALID_IDEMPOTENCY_KEY"
	CodeSubjectMismatch       Code = "SUBJECT_MISMATCH"

	// Policy.
	CodeCapabilityDenied Code = "CAPABILITY_DENIED"
	CodeWorkspaceLocked  Code = "WORKSPACE_LOCKED"
	CodePolicyDenied     Code = "POLICY_DENIED"
	CodeApprovalRequired Code = "APPROVAL_REQUIRED"
	CodeHoldExpired      Code = "HOLD_EXPIRED"

	// Resolutions and controls.
	CodeHoldNotFound        Code = "HOLD_NOT_FOUND"
	CodeHoldResolved        Code = "HOLD_RESOLVED"
	CodeGrantDigestMismatch Code = "GRANT_DIGEST_MISMATCH"
	CodeResumeDenied        Code = "RESUME_DENIED"
	CodeApprovalDenied      Code = "APPROVAL_DENIED"
	CodeInvalidResolution   Code = "INVALID_RESOLUTION"
	CodeInvalidControl      Code = "INVALID_CONTROL"
	CodeNotAuthorized       Code = "NOT_AUTHORIZED"
	CodeInvalidSignature    Code = "INVALID_SIGNATURE"

	// Execution.
	CodeNoExecutor          Code = "NO_EXECUTOR"
	CodeExecutorFailed      Code = "EXECUTOR_FAILED"
	CodeResultTooLarge      Code = "RESULT_TOO_LARGE"
	CodeRequestUnavailable  Code = "REQUEST_UNAVAILABLE"
	CodeAmbiguous           Code = "EXECUTION_AMBIGUOUS"
	CodeOperandsChanged     Code = "OPERANDS_CHANGED"
	CodePrivilegeEscalation Code = "PRIVILEGE_ESCALATION"
	CodePathEscape          Code = "PATH_ESCAPE"
	CodeInvalidPatch        Code = "INVALID_PATCH"
	CodePatchConflict       Code = "PATCH_CONFLICT"
	CodeRemoteUnavailable   Code = "REMOTE_UNAVAILABLE"
	CodeNoWorkspaceRoot     Code = "NO_WORKSPACE_ROOT"

	// Queries and transport.
	CodeNotFound     Code = "NOT_FOUND"
	CodeInvalidQuery Code = "INVALID_QUERY"
	// Result fetches (ResultQuery).
	CodeResultExpired  Code = "RESULT_EXPIRED"
	CodeResultNotKept  Code = "RESULT_NOT_KEPT"
	CodeNotRequester   Code = "NOT_REQUESTER"
	CodeNotCompleted   Code = "NOT_COMPLETED"
	CodeResultMismatch Code = "RESULT_MISMATCH"
	// CodePermissionDenied: the server refused a publish or subscribe to
	// the credential (its role may not use the subject).
	CodePermissionDenied Code = "PERMISSION_DENIED"
	// CodeNoCredential: the server refused the connection: no
	// credential was given, or one it does not know.
	CodeNoCredential Code = "NO_CREDENTIAL"
	// CodePending: the wait for an op's outcome ran out while the op
	// goes on (running, or waiting for a runner); asking again later
	// gets its outcome.
	CodePending     Code = "PENDING"
	CodeUnavailable Code = "UNAVAILABLE"
	CodeInternal    Code = "INTERNAL"
)

// AllCodes lists every code, in the order docs/errors.md lists them.
var AllCodes = []Code{
	CodeInvalidEvent, CodeUnknownEventType, CodeRequestTooLarge, CodeArgsTooLarge,
	CodeInvalidArgs, CodeInvalidName, CodeInvalidIdempotencyKey, CodeSubjectMismatch,
	CodeCapabilityDenied, CodeWorkspaceLocked, CodePolicyDenied, CodeApprovalRequired, CodeHoldExpired,
	CodeHoldNotFound, CodeHoldResolved, CodeGrantDigestMismatch, CodeApprovalDenied, CodeResumeDenied,
	CodeInvalidResolution, CodeInvalidControl, CodeNotAuthorized, CodeInvalidSignature,
	CodeNoExecutor, CodeExecutorFailed, CodeResultTooLarge, CodeRequestUnavailable, CodeAmbiguous,
	CodeOperandsChanged, CodePrivilegeEscalation, CodePathEscape, CodeInvalidPatch, CodePatchConflict,
	CodeRemoteUnavailable, CodeNoWorkspaceRoot,
	CodeNotFound, CodeInvalidQuery,
	CodeResultExpired, CodeResultNotKept, CodeNotRequester, CodeNotCompleted, CodeResultMismatch,
	CodePermissionDenied, CodeNoCredential, CodePending, CodeUnavailable, CodeInternal,
}

// Error is the one error type that crosses process boundaries. Callers
// compare codes with errors.Is, never messages.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable,omitempty"`
}

// Errorf returns a terminal *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// CodeOf returns the code of err's *Error, or CodeInternal when err carries
// none. It returns "" for a nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
