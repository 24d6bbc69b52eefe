// Run summary: energy in training steps, steps, step time and mean power of one run, per source, host and rank.
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "step")
    |> filter(fn: (r) => r._field == "energy_joules" or r._field == "duration_seconds")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")
    |> group(columns: ["host", "rank", "source"])
    |> reduce(
        identity: {steps: 0, energy_joules: 0.0, duration_seconds: 0.0},
        fn: (r, accumulator) => ({
            steps: accumulator.steps + 1,
            energy_joules: accumulator.energy_joules + r.energy_joules,
            duration_seconds: accumulator.duration_seconds + r.duration_seconds,
        }),
    )
    |> map(fn: (r) => ({r with mean_power_watts: if r.duration_seconds > 0.0 then r.energy_joules / r.duration_seconds else 0.0}))
