// CPU (all cores) and GPU utilisation over time, per host and GPU (0..1, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "cpu" and r.cpu == "total" or r._measurement == "gpu")
    |> filter(fn: (r) => r._field == "utilization_ratio" and r.host =~ /^$host$/)
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
