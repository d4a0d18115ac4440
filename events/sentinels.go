package events

// Sentinel errors, one per code, for errors.Is: an *Error matches the
// sentinel of its code whatever its message (Error.Is compares codes).
//
//	if errors.Is(err, events.ErrResultExpired) { ... }
var (
	ErrInvalidEvent          = &Error{Code: CodeInvalidEvent}
	ErrUnknownEventType      = &Error{Code: CodeUnknownEventType}
	ErrRequestTooLarge       = &Error{Code: CodeRequestTooLarge}
	ErrArgsTooLarge          = &Error{Code: CodeArgsTooLarge}
	ErrInvalidArgs           = &Error{Code: CodeInvalidArgs}
	ErrInvalidName           = &Error{Code: CodeInvalidName}
	ErrInvalidIdempotencyKey = &Error{Code: CodeInvalidIdempotencyKey}
	ErrSubjectMismatch       = &Error{Code: CodeSubjectMismatch}
	ErrCapabilityDenied      = &Error{Code: CodeCapabilityDenied}
	ErrWorkspaceLocked       = &Error{Code: CodeWorkspaceLocked}
	ErrPolicyDenied          = &Error{Code: CodePolicyDenied}
	ErrApprovalRequired      = &Error{Code: CodeApprovalRequired}
	ErrHoldExpired           = &Error{Code: CodeHoldExpired}
	ErrHoldNotFound          = &Error{Code: CodeHoldNotFound}
	ErrHoldResolved          = &Error{Code: CodeHoldResolved}
	ErrGrantDigestMismatch   = &Error{Code: CodeGrantDigestMismatch}
	ErrApprovalDenied        = &Error{Code: CodeApprovalDenied}
	ErrResumeDenied          = &Error{Code: CodeResumeDenied}
	ErrInvalidResolution     = &Error{Code: CodeInvalidResolution}
	ErrInvalidControl        = &Error{Code: CodeInvalidControl}
	ErrNotAuthorized         = &Error{Code: CodeNotAuthorized}
	ErrInvalidSignature      = &Error{Code: CodeInvalidSignature}
	ErrNoExecutor            = &Error{Code: CodeNoExecutor}
	ErrExecutorFailed        = &Error{Code: CodeExecutorFailed}
	ErrResultTooLarge        = &Error{Code: CodeResultTooLarge}
	ErrRequestUnavailable    = &Error{Code: CodeRequestUnavailable}
	ErrAmbiguous             = &Error{Code: CodeAmbiguous}
	ErrOperandsChanged       = &Error{Code: CodeOperandsChanged}
	ErrPrivilegeEscalation   = &Error{Code: CodePrivilegeEscalation}
	ErrPathEscape            = &Error{Code: CodePathEscape}
	ErrInvalidPatch          = &Error{Code: CodeInvalidPatch}
	ErrPatchConflict         = &Error{Code: CodePatchConflict}
	ErrRemoteUnavailable     = &Error{Code: CodeRemoteUnavailable}
	ErrNoWorkspaceRoot       = &Error{Code: CodeNoWorkspaceRoot}
	ErrNotFound              = &Error{Code: CodeNotFound}
	ErrInvalidQuery          = &Error{Code: CodeInvalidQuery}
	ErrResultExpired         = &Error{Code: CodeResultExpired}
	ErrResultNotKept         = &Error{Code: CodeResultNotKept}
	ErrNotRequester          = &Error{Code: CodeNotRequester}
	ErrNotCompleted          = &Error{Code: CodeNotCompleted}
	ErrResultMismatch        = &Error{Code: CodeResultMismatch}
	ErrPermissionDenied      = &Error{Code: CodePermissionDenied}
	ErrNoCredential          = &Error{Code: CodeNoCredential}
	ErrPending               = &Error{Code: CodePending}
	ErrUnavailable           = &Error{Code: CodeUnavailable}
	ErrInternal              = &Error{Code: CodeInternal}
)

// sentinels lists every sentinel, in the order of AllCodes.
var sentinels = []*Error{
	ErrInvalidEvent,
	ErrUnknownEventType,
	ErrRequestTooLarge,
	ErrArgsTooLarge,
	ErrInvalidArgs,
	ErrInvalidName,
	ErrInvalidIdempotencyKey,
	ErrSubjectMismatch,
	ErrCapabilityDenied,
	ErrWorkspaceLocked,
	ErrPolicyDenied,
	ErrApprovalRequired,
	ErrHoldExpired,
	ErrHoldNotFound,
	ErrHoldResolved,
	ErrGrantDigestMismatch,
	ErrApprovalDenied,
	ErrResumeDenied,
	ErrInvalidResolution,
	ErrInvalidControl,
	ErrNotAuthorized,
	ErrInvalidSignature,
	ErrNoExecutor,
	ErrExecutorFailed,
	ErrResultTooLarge,
	ErrRequestUnavailable,
	ErrAmbiguous,
	ErrOperandsChanged,
	ErrPrivilegeEscalation,
	ErrPathEscape,
	ErrInvalidPatch,
	ErrPatchConflict,
	ErrRemoteUnavailable,
	ErrNoWorkspaceRoot,
	ErrNotFound,
	ErrInvalidQuery,
	ErrResultExpired,
	ErrResultNotKept,
	ErrNotRequester,
	ErrNotCompleted,
	ErrResultMismatch,
	ErrPermissionDenied,
	ErrNoCredential,
	ErrPending,
	ErrUnavailable,
	ErrInternal,
}
