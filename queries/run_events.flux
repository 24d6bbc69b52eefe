// Start and end of one run per host and rank, and the spawn and exit of its tracked command per host (for annotations).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => (r._measurement == "nrg_run" or r._measurement == "nrg_job") and r._field == "event")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> map(fn: (r) => ({r with text: "run " + r.run + ": " + r._value}))
    |> group()
