// Every stored point of the chosen measurements in the time range, all fields and tags (raw: one table per series and field).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement =~ /^$measurement$/)
