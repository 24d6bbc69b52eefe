// Points the agent lost or could not write, per host and sink (cumulative counts, highest per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_collect" and r.kind == "sink" and r.host =~ /^$host$/)
    |> filter(fn: (r) => r._field =~ /^(dropped_points|rejected_points|spool_dropped_points|dead_lettered_points|lost_points)$/)
    |> aggregateWindow(every: v.windowPeriod, fn: max, createEmpty: false)
