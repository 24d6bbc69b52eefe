// Wall power measured by the emonPi meter, per node and CT channel (watts, mean per window).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "emonpi" and r._field =~ /^power[0-9]+_watts$/ and r.host =~ /^$host$/)
    |> aggregateWindow(every: v.windowPeriod, fn: mean, createEmpty: false)
