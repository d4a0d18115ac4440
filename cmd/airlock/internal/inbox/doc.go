// Package inbox is the approver inbox: a web app, served by airlock serve
// --ui, where an approver enrolled by link signs in with a passkey, sees
// the holds of its workspaces and exactly what each would run, and grants
// or denies it with a passkey signature over the approval statement
// (ADR 0021, ADR 0022), which the gate checks before it resolves.
package inbox
