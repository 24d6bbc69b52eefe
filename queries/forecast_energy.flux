// The run's forecast at each epoch end: predicted energy of the whole run and its 95 % prediction interval, per host and rank (joules).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_forecast" and r.source == "total")
    |> filter(fn: (r) => r._field == "energy_joules" or r._field == "energy_low_joules" or r._field == "energy_high_joules")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> group(columns: ["_field", "host", "rank"])
    |> sort(columns: ["_time"])
