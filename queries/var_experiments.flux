// Experiments with training steps (values of the experiment variable).
import "influxdata/influxdb/schema"

schema.tagValues(bucket: v.defaultBucket, tag: "experiment", predicate: (r) => r._measurement == "nrg_step", start: v.timeRangeStart, stop: v.timeRangeStop)
