package metrics

import "github.com/prometheus/client_golang/prometheus"

// archiveCollectors are the metrics of the archive of ended ops.
func archiveCollectors(a ArchiveStats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ArchiveEnd,
			Help: "The archive's end as this process last read or wrote it: every AIRLOCK_OPS message below it has a copy in AIRLOCK_ARCHIVE.",
		}, func() float64 { return float64(a.ArchiveEnd()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: ArchivePurges,
			Help: "Purges of ended ops' events from AIRLOCK_OPS this process made, each below the ops floor it stored first.",
		}, func() float64 { return float64(a.Purges()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ArchivePurged,
			Help: "The ops floor of this process's last purge: its op events below it have left AIRLOCK_OPS; 0 before the first.",
		}, func() float64 { return float64(a.Floor()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: ArchiveFilled,
			Help: "Gaps in AIRLOCK_OPS the projector read from AIRLOCK_ARCHIVE, in its place in the order.",
		}, func() float64 { return float64(a.Filled()) }),
		settlesCollector{a},
	}
}

var settlesDesc = prometheus.NewDesc(ArchiveSettles,
	"Checks that first events are no retries of archived ops: read=\"yes\" when the ops floor was read, \"no\" when the projection alone answered.", []string{"read"}, nil)

// settlesCollector reports both counts of Settles at each scrape.
type settlesCollector struct{ a ArchiveStats }

func (c settlesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- settlesDesc }

func (c settlesCollector) Collect(ch chan<- prometheus.Metric) {
	read, answered := c.a.Settles()
	ch <- prometheus.MustNewConstMetric(settlesDesc, prometheus.CounterValue, float64(read), "yes")
	ch <- prometheus.MustNewConstMetric(settlesDesc, prometheus.CounterValue, float64(answered), "no")
}
