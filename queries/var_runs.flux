// Runs of the selected experiments (values of the run variable).
import "influxdata/influxdb/schema"

schema.tagValues(bucket: v.defaultBucket, tag: "run", predicate: (r) => r._measurement == "nrg_step" and r.experiment =~ /^$experiment$/, start: v.timeRangeStart, stop: v.timeRangeStop)
