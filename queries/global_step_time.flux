// Duration of every global step of a distributed run: its slowest rank's step time (seconds, at the step's last end).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_step")
    |> filter(fn: (r) => r._field == "duration_seconds" or r._field == "step")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")
    |> group(columns: ["step"])
    |> reduce(
        identity: {duration_seconds: 0.0, end: time(v: 0)},
        fn: (r, accumulator) => ({
            duration_seconds: if r.duration_seconds > accumulator.duration_seconds then r.duration_seconds else accumulator.duration_seconds,
            end: if r._time > accumulator.end then r._time else accumulator.end,
        }),
    )
    |> map(fn: (r) => ({_time: r.end, step: r.step, duration_seconds: r.duration_seconds}))
    |> group()
    |> sort(columns: ["step"])
