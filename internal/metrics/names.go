package metrics

// The metric families, by name. Histograms are named without their
// _bucket, _sum and _count suffixes.
const (
	// Stored state, read at scrape time.
	OpsByState     = "airlock_ops"                          // gauge {state}
	HoldsPending   = "airlock_holds_pending"                // gauge
	HoldOldestAge  = "airlock_hold_oldest_age_seconds"      // gauge
	ProjectorLag   = "airlock_projector_lag_messages"       // gauge
	ProjectorSeq   = "airlock_projector_applied_sequence"   // gauge
	AuditLeaves    = "airlock_audit_log_leaves"             // gauge
	AuditSigned    = "airlock_audit_checkpoint_leaves"      // gauge
	AuditCheckAge  = "airlock_audit_checkpoint_age_seconds" // gauge
	AuditVerified  = "airlock_audit_verified"               // gauge
	Ready          = "airlock_ready"                        // gauge
	StreamLastSeq  = "airlock_stream_last_sequence"         // gauge {stream}
	StreamMessages = "airlock_stream_messages"              // gauge {stream}

	// Counted by the projector as it applies events.
	Events         = "airlock_events_total"               // counter {type}
	Decisions      = "airlock_decisions_total"            // counter {outcome, code, rule}
	Rejected       = "airlock_rejected_total"             // counter {code}
	Executions     = "airlock_executions_total"           // counter {tool, outcome}
	Anomalies      = "airlock_projector_anomalies_total"  // counter
	HoldResolution = "airlock_hold_resolution_seconds"    // histogram {resolution}
	GrantToExec    = "airlock_grant_to_execution_seconds" // histogram
	ExecDuration   = "airlock_execution_duration_seconds" // histogram {tool, outcome}

	// JetStream advisories about Airlock's streams and consumers.
	Advisories    = "airlock_jetstream_advisories_total"     // counter {kind, stream}
	MaxDeliveries = "airlock_jetstream_max_deliveries_total" // counter {stream, consumer}
	Terminated    = "airlock_jetstream_terminated_total"     // counter {stream, consumer}

	// The live feed (internal/livefeed), when the process has one.
	LiveFeedOn      = "airlock_live_feed"               // gauge
	LiveFeedSubs    = "airlock_live_feed_subscribers"   // gauge
	LiveFeedChanges = "airlock_live_feed_changes_total" // counter

	// Kept results (ADR 0018), when the process has an eraser.
	ResultsRetained = "airlock_results_retained_bytes" // gauge {workspace}
	ResultsExpired  = "airlock_results_expired_total"  // counter
	ResultsEvicted  = "airlock_results_evicted_total"  // counter

	// The archive of ended ops (ADR 0026), when the process has one.
	ArchiveEnd     = "airlock_archive_end_sequence"    // gauge
	ArchivePurges  = "airlock_archive_purges_total"    // counter
	ArchivePurged  = "airlock_archive_purged_below"    // gauge
	ArchiveFilled  = "airlock_archive_gaps_read_total" // counter
	ArchiveSettles = "airlock_archive_settles_total"   // counter {read}
)

// Names lists every Airlock metric family, in a slice the caller owns.
func Names() []string {
	return []string{
		OpsByState, HoldsPending, HoldOldestAge, ProjectorLag, ProjectorSeq,
		AuditLeaves, AuditSigned, AuditCheckAge, AuditVerified, Ready, StreamLastSeq, StreamMessages,
		Events, Decisions, Rejected, Executions, Anomalies, HoldResolution, GrantToExec, ExecDuration,
		Advisories, MaxDeliveries, Terminated, LiveFeedOn, LiveFeedSubs, LiveFeedChanges,
		ResultsRetained, ResultsExpired, ResultsEvicted,
		ArchiveEnd, ArchivePurges, ArchivePurged, ArchiveFilled, ArchiveSettles,
	}
}
