// Ranks of the selected runs (values of the rank variable; single-process runs have none).
import "influxdata/influxdb/schema"

schema.tagValues(bucket: v.defaultBucket, tag: "rank", predicate: (r) => r._measurement == "nrg_step" and r.experiment =~ /^$experiment$/ and r.run =~ /^$run$/, start: v.timeRangeStart, stop: v.timeRangeStop)
