// What waits to be written, per host and sink: queued and spooled points, spool bytes and the oldest spooled point's age (highest per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_collect" and r.kind == "sink" and r.host =~ /^$host$/)
    |> filter(fn: (r) => r._field =~ /^(queue_points|spool_points|spool_bytes|spool_oldest_age_seconds)$/)
    |> aggregateWindow(every: v.windowPeriod, fn: max, createEmpty: false)
