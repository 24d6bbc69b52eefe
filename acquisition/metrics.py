"""Every measurement nrg writes: its tags, its fields with type and unit, the plugin that emits it.

This table is the one description of nrg's output. The metrics reference page
(``docs/reference/metrics.md``) is generated from it (``python scripts/gen_reference.py``), and a
test drives every collector and processor with its fixtures and fails on any (measurement, field)
they emit that is missing here.

A field name may hold ``{n}`` (one or more digits: ``power{n}_watts`` stands for ``power1_watts``,
``power2_watts`` …) or be ``*`` (any name: counters that differ per plugin, documented with it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

__all__ = ["METRICS", "Field", "Measurement", "Tag", "find_field", "find_measurement"]


@dataclass(frozen=True, slots=True)
class Tag:
    name: str
    doc: str


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    """``float``, ``int``, ``string`` or ``bool`` (the line-protocol type)."""
    unit: str
    doc: str


@dataclass(frozen=True, slots=True)
class Measurement:
    name: str
    source: str
    """The plugin that emits it (``collectors.procfs``, ``processors.attribution`` …)."""
    doc: str
    tags: tuple[Tag, ...]
    fields: tuple[Field, ...]


def _f(name: str, unit: str, doc: str, type_: str = "float") -> Field:
    return Field(name, type_, unit, doc)


def _i(name: str, unit: str, doc: str) -> Field:
    return Field(name, "int", unit, doc)


_RUN_TAGS = (
    Tag("experiment", "experiment name (config, `NRG_EXPERIMENT`, or the job's `instrument()`)"),
    Tag("run", "run name (config, `NRG_RUN`, or the job's `instrument()`)"),
    Tag("rank", "rank of a distributed job; empty or absent for a single process"),
)
_EPOCH_TAG = Tag("epoch", "epoch number as a decimal string (`session.epoch()`)")
_TREE_TAGS = (
    Tag("tree", "pid of the tracked tree's root process"),
    Tag("scope", "`main` (the root), `descendants`, `combined`, or `pid` (one process)"),
    Tag("pid", "process id (`scope=pid` only, with `pid_tag = true`)"),
    Tag("comm", "process name (`scope=pid` only)"),
    Tag("instance", "the process's slot among its tree's live processes of the same name"),
)
_JOB_TAGS = (
    Tag("pid", "the job process that sent the point (stamped by the agent's hooks listener)"),
)
_GPU_TAGS = (
    Tag("gpu", "NVML index"),
    Tag("uuid", "GPU UUID"),
    Tag("name", "product name"),
)

METRICS: tuple[Measurement, ...] = (
    Measurement(
        "cpu",
        "collectors.procfs",
        "CPU time shares, machine-wide over the last interval (every tick) and per CPU over "
        "the last `core_interval` (1 s by default)",
        (Tag("cpu", "`total` (every tick) or `cpuN` (every `core_interval`)"),),
        (
            _f("utilization_ratio", "ratio 0–1", "busy time / all time"),
            _f("user_ratio", "ratio 0–1", "user and nice time / all time"),
            _f("system_ratio", "ratio 0–1", "system, irq and softirq time / all time"),
            _f("iowait_ratio", "ratio 0–1", "iowait time / all time"),
            _f("steal_ratio", "ratio 0–1", "time stolen by the hypervisor / all time"),
            _f("guest_ratio", "ratio 0–1", "time running guests / all time"),
        ),
    ),
    Measurement(
        "memory",
        "collectors.procfs",
        "system memory from /proc/meminfo",
        (),
        (
            _i("total_bytes", "bytes", "MemTotal"),
            _i("available_bytes", "bytes", "MemAvailable"),
            _i("free_bytes", "bytes", "MemFree"),
            _i("used_bytes", "bytes", "MemTotal − MemAvailable"),
            _f("used_ratio", "ratio 0–1", "used / total"),
            _i("swap_total_bytes", "bytes", "SwapTotal"),
            _i("swap_used_bytes", "bytes", "SwapTotal − SwapFree"),
        ),
    ),
    Measurement(
        "process",
        "collectors.procfs",
        "tracked process trees (the agent, tracked commands, connected training jobs)",
        _TREE_TAGS,
        (
            _f("cpu_seconds", "s", "CPU time (user + system) since the processes started"),
            _f("cpu_utilization_ratio", "ratio 0–1", "share of all CPU capacity last interval"),
            _f("cpu_cores", "cores", "CPUs kept busy on average last interval"),
            _f("cpu_busy_share_ratio", "ratio 0–1", "share of all busy CPU time last interval"),
            _i("rss_bytes", "bytes", "resident memory"),
            _i("private_bytes", "bytes", "private resident memory (smaps_rollup or statm)"),
            _i("shared_bytes", "bytes", "shared resident memory"),
            _i("pss_bytes", "bytes", "proportional set size"),
            _i("swap_bytes", "bytes", "swapped-out memory"),
            _f("memory_used_share_ratio", "ratio 0–1", "rss / used system memory"),
            _i("threads", "count", "threads"),
            _i("process_count", "count", "processes in the scope (not for `scope=pid`)"),
            _i("pid", "id", "process id (`scope=pid`; a tag instead with `pid_tag = true`)"),
        ),
    ),
    Measurement(
        "rapl",
        "collectors.rapl",
        "RAPL energy counters per domain",
        (
            Tag("socket", "package index"),
            Tag("domain", "`package`, `core`, `uncore`, `dram` or `psys`"),
            Tag("die", "die index on multi-die packages"),
        ),
        (
            _f("energy_joules", "J", "cumulative since the collector opened, wraps corrected"),
            _f("power_watts", "W", "energy delta over the interval between two reads"),
        ),
    ),
    Measurement(
        "gpu",
        "collectors.nvml",
        "NVIDIA GPUs through NVML, one point per GPU and tick",
        _GPU_TAGS,
        (
            _f("power_watts", "W", "instantaneous board power"),
            _f("power_average_watts", "W", "the driver's trailing average power"),
            _f("power_limit_watts", "W", "enforced power limit"),
            _f("energy_joules", "J", "cumulative since the collector opened (Volta and newer)"),
            _f("energy_integrated_joules", "J", "instant power integrated over ticks (older GPUs)"),
            _f("utilization_ratio", "ratio 0–1", "share of time a kernel ran"),
            _f("memory_utilization_ratio", "ratio 0–1", "share of time memory was read or written"),
            _i("memory_used_bytes", "bytes", "device memory in use"),
            _i("memory_total_bytes", "bytes", "device memory"),
            _i("memory_reserved_bytes", "bytes", "memory reserved by the driver"),
            _i("temperature_celsius", "°C", "GPU temperature"),
            _i("sm_clock_hertz", "Hz", "SM clock"),
            _i("memory_clock_hertz", "Hz", "memory clock"),
        ),
    ),
    Measurement(
        "gpu_sample",
        "collectors.nvml",
        "the driver's buffered samples, each at its own driver timestamp",
        _GPU_TAGS,
        (
            _f("power_watts", "W", "total board power"),
            _f("utilization_ratio", "ratio 0–1", "GPU utilisation"),
            _f("memory_utilization_ratio", "ratio 0–1", "memory utilisation"),
        ),
    ),
    Measurement(
        "gpu_process",
        "collectors.nvml",
        "GPU use per process and per tracked process tree",
        (
            Tag("gpu", "NVML index"),
            Tag("uuid", "GPU UUID"),
            Tag("pid", "process id (per-process points, with `pid_tag = true`)"),
            Tag("instance", "the process's slot among the processes on that GPU"),
            Tag("tree", "pid of the tracked tree's root (per-tree points)"),
            Tag("scope", "`main`, `descendants` or `combined` (per-tree points)"),
        ),
        (
            _i("memory_used_bytes", "bytes", "device memory used"),
            _i("memory_used_max_bytes", "bytes", "the most device memory used so far"),
            _i("pid", "id", "process id (per-process points; a tag with `pid_tag = true`)"),
            _f("sm_utilization_ratio", "ratio 0–1", "SM utilisation"),
            _f("memory_utilization_ratio", "ratio 0–1", "memory utilisation"),
        ),
    ),
    Measurement(
        "emonpi",
        "collectors.emonpi",
        "emonPi / emonTx frames from the serial port; layouts may add fields of their own",
        (
            Tag("node", "RF node id of the frame"),
            Tag("layout", "payload layout used to decode it"),
        ),
        (
            _f("power{n}_watts", "W", "real (or apparent, without AC) power of CT channel n"),
            _f("power1_plus_2_watts", "W", "power1 + power2 (emonPi)"),
            _f("energy{n}_wh", "Wh", "the firmware's energy counter of channel n"),
            _f("energy{n}_joules", "J", "channel n energy since the collector opened"),
            _f("energy1_plus_2_joules", "J", "power1_plus_2 integrated"),
            _f("vrms_volts", "V", "RMS voltage"),
            _f("v{n}_volts", "V", "RMS voltage of phase n"),
            _f("current{n}_amps", "A", "RMS current of channel n (calibration output)"),
            _f("power_factor{n}_ratio", "ratio", "power factor of channel n (calibration output)"),
            _f("temp{n}_celsius", "°C", "temperature sensor n"),
            _f("temp_celsius", "°C", "emonTH internal temperature"),
            _f("temp_external_celsius", "°C", "emonTH external temperature"),
            _f("humidity_percent", "%", "emonTH relative humidity"),
            _f("battery_volts", "V", "emonTH battery"),
            _i("msg_count", "count", "the firmware's message counter"),
            _i("pulse_count", "count", "pulse input count"),
            _i("pulse{n}_count", "count", "pulse input n count"),
            _i("rssi_dbm", "dBm", "radio signal strength of a relayed frame"),
            _f("analog{n}_value", "", "analog input n as printed (emon32 firmware)"),
        ),
    ),
    Measurement(
        "nrg_run",
        "training job (acquisition.torch)",
        "start and end of an instrumented training run",
        (*_RUN_TAGS, *_JOB_TAGS),
        (
            Field(
                "event",
                "string",
                "",
                "`start` or `end`; `exit` in data of older versions (now `nrg_job`)",
            ),
            _i("pid", "", "the training process's pid"),
            _i("exit_code", "", "event `exit` of older versions: the tracked command's status"),
            Field("graph_path", "string", "", "where the model graph was written"),
            Field("launcher", "string", "", "torchrun, accelerate, openmpi, mpich or slurm"),
            _i("local_rank", "", "the rank on its host, as the launcher numbers it"),
            _i("world_size", "count", "ranks of the job, as the launcher says"),
            Field("gpu_uuid", "string", "", "the CUDA device the rank trains on (`GPU-…`)"),
        ),
    ),
    Measurement(
        "nrg_job",
        "the agent (`nrg-collect -- CMD`)",
        "spawn and exit of the tracked command: the run's window",
        _RUN_TAGS[:2],
        (
            Field("event", "string", "", "`spawn` or `exit`"),
            _i("pid", "", "the command's pid"),
            _i("exit_code", "", "the command's exit status (`exit`; 128 + n for signal n)"),
        ),
    ),
    Measurement(
        "nrg_model",
        "training job (acquisition.torch)",
        "the model's modules, once per run",
        (
            Tag("experiment", "experiment name"),
            Tag("run", "run name"),
            Tag("module", "path"),
            *_JOB_TAGS,
        ),
        (
            _i("params", "count", "parameters of the module itself"),
            _i("buffers", "count", "buffer elements of the module itself"),
            _i("flops", "FLOP", "floating-point operations of one forward pass"),
            _i("macs", "count", "multiply-accumulates of one forward pass"),
        ),
    ),
    Measurement(
        "nrg_step",
        "training job (acquisition.torch)",
        "one point per optimizer step",
        (*_RUN_TAGS, _EPOCH_TAG, *_JOB_TAGS),
        (
            _i("step", "count", "step index within the run, from 0"),
            _i("start_time_ns", "ns", "start of the step, Unix epoch"),
            _i("end_time_ns", "ns", "end of the step, Unix epoch"),
            _i(
                "gpu_start_time_ns",
                "ns",
                "start of the step on the GPU's timeline, Unix epoch (CUDA)",
            ),
            _i("gpu_end_time_ns", "ns", "end of the step on the GPU's timeline, Unix epoch (CUDA)"),
            _f("duration_seconds", "s", "end − start"),
            _i("samples", "count", "samples in the step, when the job says"),
            _i("epoch", "count", "epoch as an integer field: written by older versions"),
        ),
    ),
    Measurement(
        "nrg_module",
        "training job (acquisition.torch)",
        "one point per module and phase per step",
        (
            *_RUN_TAGS,
            _EPOCH_TAG,
            Tag("module", "module path"),
            Tag("phase", "`forward` or `backward`"),
            *_JOB_TAGS,
        ),
        (
            _i("step", "count", "step index"),
            _i("calls", "count", "calls of the module in the step"),
            _f("inclusive_seconds", "s", "wall time including child modules"),
            _f("exclusive_seconds", "s", "wall time excluding child modules"),
            _f("gpu_seconds", "s", "GPU time excluding child modules (CUDA)"),
            _f("gpu_inclusive_seconds", "s", "GPU time including child modules (CUDA)"),
            _i("epoch", "count", "epoch as an integer field: written by older versions"),
        ),
    ),
    Measurement(
        "nrg_energy",
        "processors.attribution",
        "energy per training step, per module, unattributed, and the rest of the system",
        (
            *_RUN_TAGS,
            _EPOCH_TAG,
            Tag("source", "`rapl:<domain>-<socket>`, `nvml:<index>`, `emonpi:<node>`"),
            Tag("scope", "`step`, `module`, `unattributed` or `rest_of_system`"),
            Tag("module", "module path (`scope=module`)"),
            Tag("phase", "`forward` or `backward` (`scope=module`)"),
        ),
        (
            _i("step", "count", "the step; for epoch sums the last step summed"),
            _i("steps", "count", "steps summed (`scope=module` with per-epoch module detail)"),
            _f("energy_joules", "J", "energy of the scope in the step (or epoch sum)"),
            _f("duration_seconds", "s", "step duration, module time, or time outside modules"),
            _f("mean_power_watts", "W", "energy_joules / duration_seconds (absent for 0 s)"),
            _f("error_joules", "J", "error bound of the step's energy (`scope=step`)"),
            _f("error_start_joules", "J", "error bound of the energy up to the step's start"),
            _f("error_end_joules", "J", "error bound of the energy up to the step's end"),
        ),
    ),
    Measurement(
        "nrg_plan",
        "training job (acquisition.torch)",
        "the run's declared length (`instrument(..., epochs=N)`, `session.plan()`)",
        (*_RUN_TAGS, *_JOB_TAGS),
        (
            _i("epochs", "count", "epochs the run will take"),
            _i("steps_per_epoch", "count", "optimizer steps per epoch, when the job says"),
        ),
    ),
    Measurement(
        "nrg_carbon",
        "processors.carbon",
        "the carbon intensity the run used and where it came from, at the agent's first point "
        "and at each job's start",
        _RUN_TAGS,
        (
            _f("g_per_kwh", "g/kWh", "grams CO2e per kWh"),
            Field("source", "string", "", "where the figure comes from (table, service, setting)"),
        ),
    ),
    Measurement(
        "nrg_forecast",
        "processors.forecast",
        "the run's predicted duration, energy and CO2e, at the end of each epoch; "
        "intervals are 95 % Student-t prediction intervals",
        (
            *_RUN_TAGS,
            Tag("epoch", "the epoch just finished (decimal string)"),
            Tag("source", "`total` (the counted sources' sum) or a source as in `nrg_energy`"),
        ),
        (
            _i("epochs_done", "count", "epochs finished"),
            _i("epochs", "count", "epochs planned"),
            _f("energy_joules", "J", "predicted energy of the whole run"),
            _f("energy_low_joules", "J", "low end of its prediction interval"),
            _f("energy_high_joules", "J", "high end of its prediction interval"),
            _f("energy_spent_joules", "J", "energy from the run's start to this epoch's end"),
            _f("energy_remaining_joules", "J", "predicted energy of the epochs still to run"),
            _f("elapsed_seconds", "s", "time from the run's start (`source=total`)"),
            _f("remaining_seconds", "s", "predicted time still to run (`source=total`)"),
            _f("remaining_low_seconds", "s", "low end of its interval (`source=total`)"),
            _f("remaining_high_seconds", "s", "high end of its interval (`source=total`)"),
            _f("total_seconds", "s", "predicted duration of the run (`source=total`)"),
            _f("total_low_seconds", "s", "low end of its interval (`source=total`)"),
            _f("total_high_seconds", "s", "high end of its interval (`source=total`)"),
            _f("co2e_grams", "g", "predicted CO2e of the run (`source=total`)"),
            _f("co2e_low_grams", "g", "low end of its interval (`source=total`)"),
            _f("co2e_high_grams", "g", "high end of its interval (`source=total`)"),
            _f("carbon_intensity_g_per_kwh", "g/kWh", "intensity used for CO2e (`source=total`)"),
            _f("level_ratio", "ratio 0–1", "coverage of the intervals (0.95)"),
            Field("basis", "string", "", "`epochs` or `steps`: what the spread is taken from"),
        ),
    ),
    Measurement(
        "process_power",
        "processors.process_power",
        "RAPL power shared out by a tracked tree's CPU and memory share",
        _TREE_TAGS,
        (
            _f("cpu_power_watts", "W", "CPU share × package power of all sockets"),
            _f("dram_power_watts", "W", "memory share × DRAM power of all sockets"),
            _f("cpu_energy_joules", "J", "cpu_power_watts integrated, since first seen"),
            _f("dram_energy_joules", "J", "dram_power_watts integrated, since first seen"),
        ),
    ),
    Measurement(
        "nrg_collect",
        "the agent",
        "the agent's own health, every `stats_interval` and at shutdown",
        (
            Tag("plugin", "plugin label, or `agent`"),
            Tag("kind", "`collector`, `sink`, `processor` or `agent`"),
        ),
        (
            _i("runs", "count", "collector: collect calls"),
            _i("errors", "count", "collector or processor: calls that raised"),
            _i("timeouts", "count", "collector: calls past their timeout"),
            _i("skipped_ticks", "count", "collector: ticks missed while a call ran late"),
            _i("points", "count", "collector: points emitted; agent: points on the bus"),
            _f("duration_seconds", "s", "collector: mean call time; sink: mean write time"),
            _f("duration_max_seconds", "s", "collector: longest call"),
            _f("lateness_max_seconds", "s", "collector: latest tick start"),
            _i("points_in", "count", "sink or processor: points received"),
            _i("points_out", "count", "processor: points emitted"),
            _i("points_written", "count", "sink: points written"),
            _i("dropped_points", "count", "sink or agent: points lost"),
            _i("spilled_points", "count", "sink: points put in the on-disk spool"),
            _i("rejected_points", "count", "sink: points the server refused"),
            _i("unencodable_points", "count", "sink: points line protocol cannot carry, dropped"),
            _i("write_errors", "count", "sink: failed writes"),
            _i("retries", "count", "sink: retried writes"),
            _i("queue_points", "count", "sink: points waiting in memory"),
            _i("queue_max_points", "count", "sink: the most points waiting so far"),
            _f("uptime_seconds", "s", "agent: time since start"),
            _i("collectors", "count", "agent: collectors running"),
            _i("unavailable_collectors", "count", "agent: collectors with no data here"),
            Field("*", "int", "count", "the plugin's own counters, listed on its page"),
        ),
    ),
)


def _pattern(name: str) -> re.Pattern[str]:
    if name == "*":
        return re.compile(r".+")
    return re.compile("".join(r"\d+" if p == "{n}" else re.escape(p) for p in _split(name)))


def _split(name: str) -> list[str]:
    return [p for p in re.split(r"(\{n\})", name) if p]


@cache
def _compiled() -> dict[str, tuple[Measurement, list[tuple[re.Pattern[str], Field]]]]:
    return {m.name: (m, [(_pattern(f.name), f) for f in m.fields]) for m in METRICS}


def find_measurement(name: str) -> Measurement | None:
    """The table's entry for a measurement, or None."""
    entry = _compiled().get(name)
    return entry[0] if entry else None


def find_field(measurement: str, field: str) -> Field | None:
    """The table's entry for a field of a measurement (patterns included), or None."""
    entry = _compiled().get(measurement)
    if entry is None:
        return None
    for pattern, f in entry[1]:
        if pattern.fullmatch(field):
            return f
    return None
