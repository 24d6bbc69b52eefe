// Duration of every training step of one run, per host and rank (seconds, at each step's end).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_step" and r._field == "duration_seconds")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> group(columns: ["host", "rank"])
    |> sort(columns: ["_time"])
