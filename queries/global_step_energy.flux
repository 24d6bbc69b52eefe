// Energy of every global step of a distributed run (the steps of all its ranks with the same number), each host's sources counted once (joules, at the step's last end).
from(bucket: v.defaultBucket)
    |> range(start: v.timeRangeStart, stop: v.timeRangeStop)
    |> filter(fn: (r) => r._measurement == "nrg_energy" and r.scope == "step")
    |> filter(fn: (r) => r._field == "energy_joules" or r._field == "step")
    |> filter(fn: (r) => r.experiment == "$experiment" and r.run == "$run")
    |> filter(fn: (r) => r.host =~ /^$host$/ and ((not exists r.rank) or r.rank =~ /^$rank$/))
    |> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")
    |> group(columns: ["host", "source", "step"])
    |> reduce(
        identity: {energy_joules: 0.0, end: time(v: 0)},
        fn: (r, accumulator) => ({
            energy_joules: if r.energy_joules > accumulator.energy_joules then r.energy_joules else accumulator.energy_joules,
            end: if r._time > accumulator.end then r._time else accumulator.end,
        }),
    )
    |> group(columns: ["step"])
    |> reduce(
        identity: {energy_joules: 0.0, end: time(v: 0)},
        fn: (r, accumulator) => ({
            energy_joules: accumulator.energy_joules + r.energy_joules,
            end: if r.end > accumulator.end then r.end else accumulator.end,
        }),
    )
    |> map(fn: (r) => ({_time: r.end, step: r.step, energy_joules: r.energy_joules}))
    |> group()
    |> sort(columns: ["step"])
