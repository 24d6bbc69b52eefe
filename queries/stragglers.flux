// Stragglers of a distributed run, per rank: steps in which it was the slowest, its wait from its step end (the step point's time) to the slowest rank's (seconds) and the energy its share of its host used meanwhile (joules).
steps = from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_step" and r._field == "step")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> map(fn: (r) => ({host: r.host, rank: r.rank, step: r._value, end_time_ns: int(v: r._time)}))
    |> group()
slowest = steps
    |> group(columns: ["step"])
    |> max(column: "end_time_ns")
    |> group()
    |> keep(columns: ["step", "end_time_ns"])
    |> rename(columns: {end_time_ns: "slowest_end_ns"})
ranks = steps
    |> group(columns: ["host", "rank"])
    |> first(column: "step")
    |> group(columns: ["host"])
    |> count(column: "step")
    |> group()
    |> rename(columns: {step: "host_ranks"})
power = from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "step")
    |> filter(fn: (r) => r._field == "energy_joules" or r._field == "duration_seconds" or r._field == "step")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")
    |> group(columns: ["host", "rank", "step"])
    |> reduce(
        identity: {energy_joules: 0.0, duration_seconds: 0.0},
        fn: (r, accumulator) => ({
            energy_joules: accumulator.energy_joules + r.energy_joules,
            duration_seconds: if r.duration_seconds > accumulator.duration_seconds then r.duration_seconds else accumulator.duration_seconds,
        }),
    )
    |> group()
waits = join(tables: {s: steps, m: slowest}, on: ["step"])
with_power = join(tables: {w: waits, p: power}, on: ["host", "rank", "step"])
join(tables: {w: with_power, n: ranks}, on: ["host"])
    |> map(fn: (r) => {
        wait = float(v: r.slowest_end_ns - r.end_time_ns) / 1000000000.0
        watts = if r.duration_seconds > 0.0 then r.energy_joules / float(v: r.host_ranks) / r.duration_seconds else 0.0
        return {host: r.host, rank: r.rank, slowest_steps: if wait == 0.0 then 1 else 0, wait_seconds: wait, wait_energy_joules: wait * watts}
    })
    |> group(columns: ["host", "rank"])
    |> reduce(
        identity: {slowest_steps: 0, wait_seconds: 0.0, wait_energy_joules: 0.0},
        fn: (r, accumulator) => ({
            slowest_steps: accumulator.slowest_steps + r.slowest_steps,
            wait_seconds: accumulator.wait_seconds + r.wait_seconds,
            wait_energy_joules: accumulator.wait_energy_joules + r.wait_energy_joules,
        }),
    )
    |> group()
    |> sort(columns: ["host", "rank"])
