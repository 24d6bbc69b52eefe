// Memory in use over time: host RAM and each GPU's memory, per host (bytes, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "memory" or r._measurement == "gpu")
    |> filter(fn: (r) => r._field == "used_bytes" or r._field == "memory_used_bytes")
    |> filter(fn: (r) => r.host =~ /^$host$/)
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
