// Power over time per source: RAPL package and DRAM per socket, and every GPU (watts, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "rapl" and (r.domain == "package" or r.domain == "dram") or r._measurement == "gpu")
    |> filter(fn: (r) => r._field == "power_watts" and r.host =~ /^$host$/)
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
