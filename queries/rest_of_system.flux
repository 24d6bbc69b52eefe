// Rest of system: wall power minus RAPL and GPU power during training steps of every run, per host and rank (watts, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "rest_of_system" and r._field == "mean_power_watts")
    |> filter(fn: (r) => r.host =~ /^$host$/)
    |> group(columns: ["host", "rank", "source"])
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
