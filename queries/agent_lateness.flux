// How late the collectors read, per host and collector: worst tick lateness (seconds), skipped ticks, errors and timeouts (highest per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_collect" and r.kind == "collector" and r.host =~ /^$host$/)
    |> filter(fn: (r) => r._field =~ /^(lateness_max_seconds|skipped_ticks|errors|timeouts)$/)
    |> aggregateWindow(every: v.windowPeriod, fn: max, createEmpty: false)
