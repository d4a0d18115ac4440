package deploy_test

import "slices"

// The metrics of prometheus-nats-exporter that the dashboard and the
// alerts may use, with their labels. The exporter is not a dependency of
// this module, so they are pinned here, as read from
// github.com/nats-io/prometheus-nats-exporter, collector/jsz.go at commit
// e58bd1d30bd779793e038897a2c5ad1a26a6de50 (the version whose stream
// labels include stream_raft_group and which exports
// jetstream_stream_limit_bytes): prometheus.BuildFQName("jetstream",
// subsystem, name), system JetStreamSystem = "jetstream" in
// collector/collector.go. The exporter runs with -jsz=all, which reads
// /jsz?consumers=true&config=true&raft=true.
var (
	exporterServerLabels = []string{
		"server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader",
	}
	exporterStreamLabels = append(slices.Clone(exporterServerLabels),
		"account", "account_id", "stream_name", "stream_leader", "is_stream_leader", "stream_raft_group")
	exporterConsumerLabels = append(slices.Clone(exporterStreamLabels),
		"consumer_name", "consumer_leader", "is_consumer_leader", "consumer_desc")
)

// natsExporterMetrics maps each pinned metric to its labels.
var natsExporterMetrics = map[string][]string{
	"jetstream_server_jetstream_disabled":  exporterServerLabels,
	"jetstream_server_total_streams":       exporterServerLabels,
	"jetstream_server_total_consumers":     exporterServerLabels,
	"jetstream_server_total_messages":      exporterServerLabels,
	"jetstream_server_total_message_bytes": exporterServerLabels,
	"jetstream_server_max_memory":          exporterServerLabels,
	"jetstream_server_max_storage":         exporterServerLabels,

	"jetstream_stream_total_messages": exporterStreamLabels,
	"jetstream_stream_total_bytes":    exporterStreamLabels,
	"jetstream_stream_first_seq":      exporterStreamLabels,
	"jetstream_stream_last_seq":       exporterStreamLabels,
	"jetstream_stream_consumer_count": exporterStreamLabels,
	"jetstream_stream_subject_count":  exporterStreamLabels,
	"jetstream_stream_limit_bytes":    exporterStreamLabels,
	"jetstream_stream_limit_messages": exporterStreamLabels,

	"jetstream_consumer_delivered_consumer_seq": exporterConsumerLabels,
	"jetstream_consumer_delivered_stream_seq":   exporterConsumerLabels,
	"jetstream_consumer_num_ack_pending":        exporterConsumerLabels,
	"jetstream_consumer_num_redelivered":        exporterConsumerLabels,
	"jetstream_consumer_num_waiting":            exporterConsumerLabels,
	"jetstream_consumer_num_pending":            exporterConsumerLabels,
	"jetstream_consumer_ack_floor_stream_seq":   exporterConsumerLabels,
	"jetstream_consumer_ack_floor_consumer_seq": exporterConsumerLabels,
}

// prometheusMetrics are the series Prometheus itself writes for every
// target.
var prometheusMetrics = map[string][]string{
	"up": nil,
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}
