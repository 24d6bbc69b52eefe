// Hosts that wrote points (values of the host variable).
import "influxdata/influxdb/schema"

schema.tagValues(bucket: v.defaultBucket, tag: "host", start: v.timeRangeStart, stop: v.timeRangeStop)
