// Energy in the training steps of a distributed run, over all its hosts and ranks, per source (joules).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "step" and r._field == "energy_joules")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> group(columns: ["source"])
    |> sum()
