// Every stored point of one run (its run tag) in the chosen measurements and time range, all fields and tags (raw).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement =~ /^$measurement$/ and r.run == "$run")
