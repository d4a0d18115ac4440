// Package approvers keeps the approver inbox's records in the approvers
// bucket (streams.ApproversBucket), which only the service account has:
// accounts (the workspaces each approver may resolve in and the passkeys
// it enrolled), single-use enrollment and hold links, and sessions. A
// token is never stored, only its SHA-256; using a link deletes its record
// at the revision read, so of two uses, in any processes, one wins.
package approvers
