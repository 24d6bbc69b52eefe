// Power of a distributed run's hosts side by side: attributed step power per host, rank and source (watts, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "step" and r._field == "mean_power_watts")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> group(columns: ["host", "rank", "source"])
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
