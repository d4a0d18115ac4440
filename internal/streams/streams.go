package streams

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and consumer names.
const (
	// Requests holds tool.requested messages: the only place argument
	// plaintext lives, deduplicated by Nats-Msg-Id.
	Requests = "AIRLOCK_REQUESTS"
	// Ops holds every op transition and every rejection: the one ordered
	// log the projector folds and executors take work from.
	Ops = "AIRLOCK_OPS"
	// Held is the stream of held ops' requests (argument plaintext), one
	// per op, moved out of Requests while the hold lasts.
	Held = "AIRLOCK_HELD"
	// Results is the stream of completed ops' results, each sealed to the
	// agent that asked (ADR 0018), kept for the op's retention.
	Results = "AIRLOCK_RESULTS"
	// Archive holds segments of Ops: copies of its messages, range after
	// contiguous range, in order (internal/archive, ADR 0026). Ops'
	// ended ops may leave Ops below the archive's end; the archive keeps
	// them for good.
	Archive = "AIRLOCK_ARCHIVE"
	// GateConsumer is the gate's durable consumer of requests.
	GateConsumer = "airlock-gate"
	// ResumeConsumer is the gate's durable consumer of granted events.
	ResumeConsumer = "airlock-resume"
	// AuditBucket is the KV bucket that keeps the audit log's newest
	// checkpoints outside the projection's store (the stream
	// KV_airlock-audit).
	AuditBucket = "airlock-audit"
	// AuditHistory is how many earlier checkpoints the bucket keeps per
	// key besides the newest.
	AuditHistory = 64
	// MaxMsgBytes bounds one message in either stream.
	MaxMsgBytes = 2 << 20
)

// WrittenByAirlock reports whether every message of the stream named is
// one Airlock wrote: the op log, held requests, results and Airlock's
// buckets, not the requests stream agents publish to. natsrv.CheckBlocks
// checks these streams' records beyond their checksums.
func WrittenByAirlock(stream string) bool {
	switch stream {
	case Ops, Held, Results, Archive, "KV_" + AuditBucket, "KV_" + ApproversBucket:
		return true
	}
	return false
}

// DefaultExecutorGroup names the executors that share work by default.
const DefaultExecutorGroup = "airlock-exec"

// GroupRule says what an executor group name may be.
const GroupRule = "1 to 64 letters, digits, '_' and '-'"

var groupPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidGroup reports whether s may name an executor group: its consumers'
// names are <group>-<tool>.
func ValidGroup(s string) bool { return groupPattern.MatchString(s) }

// ExecutorConsumer is the durable consumer through which one group of
// executors takes one tool's decided events. Executors of one group share
// the work; two groups would each run every op's claim race.
func ExecutorConsumer(group, tool string) string { return group + "-" + tool }

// Config configures the streams. The zero value is valid.
type Config struct {
	// Replicas is the replica count of each stream; 0 means 1.
	Replicas int
	// Duplicates is the Nats-Msg-Id dedupe window; 0 means 2 minutes. It
	// is the first line of defence only: an op's subject makes a request
	// idempotent for ever.
	Duplicates time.Duration
	// Memory stores the streams in memory instead of files (benchmarks).
	Memory bool
	// Live makes AIRLOCK_OPS republish every message it stores on
	// airlock.v1.live.> (events.LivePrefix), for watchers. The server
	// republishes whether or not anyone listens, at a cost per message, so
	// internal/livefeed turns it on only while someone subscribes (SetLive);
	// this is the state Provision starts with.
	Live bool
	// PurgeOps makes a new AIRLOCK_OPS allow purges, so that ops copied
	// into AIRLOCK_ARCHIVE may leave it (ADR 0026). JetStream never lets a
	// stream that denies purges allow them: an existing stream keeps what
	// it was made with.
	PurgeOps bool
	// ArchiveKeep is, for a new AIRLOCK_OPS, how many of its newest
	// messages, as a purger's projection knows them, a purge of ended ops
	// always leaves (ADR 0030): a settle of events within that distance of
	// the projection needs no read of the ops floor. It is recorded in the
	// stream's metadata (MetaArchiveKeep) and read from there by every
	// process (OpsArchiveKeep): an existing stream keeps what it was made
	// with, none for a stream made before (0, ADR 0028's settles).
	ArchiveKeep uint64
}

// MetaArchiveKeep is the key of AIRLOCK_OPS's metadata that records
// Config.ArchiveKeep.
const MetaArchiveKeep = "airlock_archive_keep"

// DefaultArchiveKeep is serve's and bench's Config.ArchiveKeep: more
// messages than a projection trails its own process's appends by under
// load (hundreds to a few thousand), so that settles read nothing, and
// few enough that the subject index a purge walks stays small when
// ops are few (docs/performance.md, "What a purge stalls").
const DefaultArchiveKeep = 1 << 13

// OpsArchiveKeep is the ArchiveKeep an ops stream was made with: 0 when
// its metadata records none, or something that is not a count.
func OpsArchiveKeep(sc jetstream.StreamConfig) uint64 {
	n, err := strconv.ParseUint(sc.Metadata[MetaArchiveKeep], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
	}
	return c
}

// RequestsConfig is the configuration of the requests stream. It allows
// purges: the scrubber erases the requests of ended ops below the lowest
// one still needed with one purge (ADR 0024); only Airlock's own
// principal reaches the stream's API.
func RequestsConfig(c Config) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        Requests,
		Description: "Airlock tool requests (argument plaintext)",
		Subjects:    []string{events.RequestSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage(c),
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		MaxMsgSize:  MaxMsgBytes,
		Discard:     jetstream.DiscardNew,
		AllowDirect: true,
	}
}

// HeldConfig is the configuration of the held requests stream: one
// message per held op (the request, as it was published), erased with the
// op's other request bytes when the op ends. Few ops are held at once, so
// its blocks are small and a secure delete there is cheap.
func HeldConfig(c Config) jetstream.StreamConfig {
	// The requests stream's settings (storage, replicas, window, size,
	// discard, direct gets), no purge, one message per op.
	sc := RequestsConfig(c)
	sc.DenyPurge = true
	sc.Name = Held
	sc.Description = "Airlock held ops' requests (argument plaintext), while they are held"
	sc.Subjects = []string{events.HeldSubjects}
	sc.MaxMsgsPerSubject = 1
	return sc
}

// ResultsConfig is the configuration of the results stream: completed
// ops' sealed results on one subject per workspace, each named by its
// completed event's result_seq (ADR 0027), with a per-message TTL (its
// retention and ResultTTLMargin) that removes it should Airlock never
// erase it, and deleted when its retention ends. Only Airlock's own
// principal reads it: no client imports it.
func ResultsConfig(c Config) jetstream.StreamConfig {
	// The requests stream's settings (storage, replicas, window, size,
	// discard, direct gets), purges allowed, per-message TTLs.
	sc := RequestsConfig(c)
	sc.Name = Results
	sc.Description = "Airlock results, each sealed to the agent that asked"
	sc.Subjects = []string{events.ResultSubjects}
	sc.AllowMsgTTL = true
	return sc
}

// ResultTTLMargin is how long after its retention a result's own TTL
// removes it, in case no Airlock process erased it in time.
const ResultTTLMargin = time.Hour

// OpsConfig is the configuration of the ops stream.
func OpsConfig(c Config) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        Ops,
		Description: "Airlock op transitions, rejections, controls and policy changes",
		Subjects:    []string{events.OpSubjects, events.RejectedSubjects, events.SysSubjects},
		Retention:   jetstream.LimitsPolicy,
		Storage:     storage(c),
		Replicas:    c.Replicas,
		Duplicates:  c.Duplicates,
		MaxMsgSize:  MaxMsgBytes,
		Discard:     jetstream.DiscardNew,
		AllowDirect: true,
		DenyPurge:   !c.PurgeOps,
		DenyDelete:  true,
		RePublish:   rePublish(c.Live),
		Metadata:    archiveKeepMeta(c),
	}
}

// archiveKeepMeta is a new ops stream's metadata: its ArchiveKeep, when
// ended ops may leave it.
func archiveKeepMeta(c Config) map[string]string {
	if !c.PurgeOps || c.ArchiveKeep == 0 {
		return nil
	}
	return map[string]string{MetaArchiveKeep: strconv.FormatUint(c.ArchiveKeep, 10)}
}

// ArchiveConfig is the configuration of the archive stream: segments of
// the ops stream, and the floors of its purges, never deleted nor purged
// (a segment is the only copy of what Ops no longer holds).
func ArchiveConfig(c Config) jetstream.StreamConfig {
	// The requests stream's settings (storage, replicas, window, size,
	// discard, direct gets), neither deletes nor purges. No compression of
	// the stream's own: each segment comes compressed (archive.Encoder), so
	// the server neither parses, copies, replicates nor checks the full
	// size, nor compresses its blocks again. An archive stream made
	// compressed by an earlier version is updated to this; the blocks it
	// compressed stay readable.
	sc := RequestsConfig(c)
	sc.Name = Archive
	sc.Description = "Airlock archive: AIRLOCK_OPS in segments, in order"
	sc.Subjects = []string{events.ArchiveSubject, events.ArchiveFloorSubject}
	sc.DenyPurge, sc.DenyDelete = true, true
	return sc
}

// rePublish is the ops stream's RePublish when the live feed is on: every
// stored message again, for watchers (events.LivePrefix); nil when off.
func rePublish(live bool) *jetstream.RePublish {
	if !live {
		return nil
	}
	return &jetstream.RePublish{Source: events.SubjectRoot + ".>", Destination: events.LiveSubjects}
}

// SetLive turns the ops stream's live feed on or off and reports whether
// it changed anything. It changes the RePublish of the stream's config as
// the server holds it and nothing else.
func SetLive(ctx context.Context, js jetstream.JetStream, on bool) (changed bool, err error) {
	st, err := js.Stream(ctx, Ops)
	if err != nil {
		return false, fmt.Errorf("live feed: %w", err)
	}
	cfg := st.CachedInfo().Config
	want := rePublish(on)
	if sameRePublish(cfg.RePublish, want) {
		return false, nil
	}
	cfg.RePublish = want
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return false, fmt.Errorf("live feed: update stream %s: %w", Ops, err)
	}
	return true, nil
}

// Live reports whether the ops stream's live feed is on, as the server
// holds its config now.
func Live(ctx context.Context, js jetstream.JetStream) (bool, error) {
	st, err := js.Stream(ctx, Ops)
	if err != nil {
		return false, fmt.Errorf("live feed: %w", err)
	}
	return st.CachedInfo().Config.RePublish != nil, nil
}

func storage(c Config) jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Provision creates or updates both streams, and turns the live feed on
// or off as c.Live says. A stream whose settings differ from Airlock's gets
// Airlock's whole config, but the live feed alone changes nothing else
// (SetLive): an existing stream keeps its RePublish through the update.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	for _, sc := range []jetstream.StreamConfig{RequestsConfig(c), OpsConfig(c), HeldConfig(c), ResultsConfig(c), ArchiveConfig(c)} {
		if err := provisionStream(ctx, js, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	if _, err := SetLive(ctx, js, c.Live); err != nil {
		return err
	}
	if err := provisionAudit(ctx, js, c); err != nil {
		return err
	}
	return provisionApprovers(ctx, js, c)
}

// provisionStream creates sc's stream, or updates it to sc where it
// differs, keeping what is settled when it is made. A stream that another
// process made a moment before (both found none) is updated as if it had
// been found: what it was made with stays.
func provisionStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	st, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, sc); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		st, err = js.Stream(ctx, sc.Name)
	}
	if err != nil {
		return err
	}
	have := st.CachedInfo().Config
	sc.RePublish = have.RePublish
	// JetStream never lets a stream that denies purges allow them: a
	// requests stream made by an earlier version keeps denying them, and
	// its scrubber deletes each request on its own.
	sc.DenyPurge = sc.DenyPurge || have.DenyPurge
	if sc.Name == Ops {
		// Whether AIRLOCK_OPS allows purges is settled when it is made
		// (Config.PurgeOps): a restart never takes it away. So is what its
		// purges keep (Config.ArchiveKeep): every process reads it from
		// the stream, and none may purge closer than another settles.
		sc.DenyPurge = have.DenyPurge
		sc.Metadata = have.Metadata
	}
	if same(have, sc) {
		return nil // nothing to change: no update, no advisory
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// provisionAudit creates the audit checkpoint bucket, or updates it when
// its settings differ.
func provisionAudit(ctx context.Context, js jetstream.JetStream, c Config) error {
	kc := AuditConfig(c)
	if kv, err := js.KeyValue(ctx, kc.Bucket); err == nil {
		if st, err := kv.Status(ctx); err == nil && st.History() == int64(kc.History) && st.BackingStore() == "JetStream" {
			return nil
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
		return fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
	}
	return nil
}

// provisionApprovers creates the approvers bucket, or updates it when
// its settings differ.
func provisionApprovers(ctx context.Context, js jetstream.JetStream, c Config) error {
	kc := ApproversConfig(c)
	if kv, err := js.KeyValue(ctx, kc.Bucket); err == nil {
		if st, err := kv.Status(ctx); err == nil && st.History() == int64(kc.History) && st.LimitMarkerTTL() == kc.LimitMarkerTTL {
			return nil
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
		return fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
	}
	return nil
}

// ApproversBucket keeps the approver inbox's accounts (workspaces,
// passkeys), single-use enrollment and hold links, and sessions. Only the
// service account has it: no client principal reads or writes it.
const ApproversBucket = "airlock-approvers"

// ApproversConfig is the configuration of the approvers bucket. Its keys
// may carry their own TTL (links, enrollments, sessions).
func ApproversConfig(c Config) jetstream.KeyValueConfig {
	c = c.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:         ApproversBucket,
		Description:    "Airlock approver accounts, passkeys, links and sessions",
		History:        1,
		MaxValueSize:   64 << 10,
		Storage:        storage(c),
		Replicas:       c.Replicas,
		LimitMarkerTTL: time.Minute,
	}
}

// AuditCheckpointKey is the bucket key of the deployment's newest
// checkpoint of the log with origin: "checkpoint.<the origin's last
// element>". Every instance of a deployment signs the same log with the
// same key, so they share this key; a bucket also keeps the keys of logs
// of other origins (older deployments), each under its own.
func AuditCheckpointKey(origin string) string {
	return "checkpoint." + originID(origin)
}

// AuditInstanceKey is the bucket key of the newest checkpoint one
// instance (one data dir) signed of the log with origin:
// "checkpoint.<origin id>.<instance>".
func AuditInstanceKey(origin, instance string) string {
	return AuditCheckpointKey(origin) + "." + instance
}

// AuditInstanceKeys matches every AuditInstanceKey of origin.
func AuditInstanceKeys(origin string) string { return AuditCheckpointKey(origin) + ".*" }

// AuditLogKey is the bucket key that names the deployment's audit log: its
// verifier key (audit.pub), written by the first instance to start. An
// instance whose audit key is another is refused at start.
const AuditLogKey = "log"

func originID(origin string) string { return origin[strings.LastIndexByte(origin, '/')+1:] }

// AuditConfig is the configuration of the audit checkpoint bucket.
func AuditConfig(c Config) jetstream.KeyValueConfig {
	c = c.withDefaults()
	return jetstream.KeyValueConfig{
		Bucket:       AuditBucket,
		Description:  "Airlock audit log checkpoints (signed notes)",
		History:      AuditHistory,
		MaxValueSize: 4 << 10,
		Storage:      storage(c),
		Replicas:     c.Replicas,
	}
}

// same reports whether the server's config has every setting Airlock sets.
func same(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Description == want.Description &&
		have.Retention == want.Retention && have.Storage == want.Storage &&
		have.Replicas == want.Replicas && have.Duplicates == want.Duplicates &&
		have.MaxMsgSize == want.MaxMsgSize && have.Discard == want.Discard &&
		have.AllowDirect == want.AllowDirect && have.DenyPurge == want.DenyPurge &&
		have.DenyDelete == want.DenyDelete && have.AllowMsgTTL == want.AllowMsgTTL && have.Compression == want.Compression && sameRePublish(have.RePublish, want.RePublish)
}

func sameRePublish(a, b *jetstream.RePublish) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
