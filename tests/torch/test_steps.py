"""The per-step aggregator on literal event streams: nesting, exclusive time, steps, epochs."""

from __future__ import annotations

import tracemalloc
from functools import partial

import pytest

import acquisition.torch.steps as steps_module
from acquisition.lineproto import LineEncoder
from acquisition.point import Point
from acquisition.torch.hooks import BWD_POST, BWD_PRE, EPOCH, FWD_POST, FWD_PRE, RETIME, STEP
from acquisition.torch.steps import (
    ModuleTiming,
    StepAggregator,
    StepLines,
    StepRecord,
    step_points,
)


class M:
    """Stands for a module: the aggregator only needs identity."""

    def __init__(self, name: str) -> None:
        self.name = name


root, a, b, loss = M("root"), M("a"), M("b"), M("loss")
NAMES = {root: "", a: "a", b: "b"}


def test_nesting_counts_and_exclusive_time() -> None:
    agg = StepAggregator(NAMES)
    events = [
        (root, 100, FWD_PRE),
        (a, 110, FWD_PRE),
        (a, 130, FWD_POST),
        (b, 135, FWD_PRE),
        (b, 140, FWD_POST),
        (a, 150, FWD_PRE),  # a reused: two calls, one name
        (a, 160, FWD_POST),
        (root, 170, FWD_POST),
        (loss, 171, FWD_PRE),  # not part of the model: transparent
        (loss, 175, FWD_POST),
        (root, 180, BWD_PRE),
        (b, 182, BWD_PRE),
        (b, 190, BWD_POST),
        (root, 200, BWD_POST),
        (None, 210, STEP),
    ]
    (record,) = agg.feed(events)
    assert (record.step, record.epoch, record.start_ns, record.end_ns) == (0, 0, 100, 210)
    assert record.modules == {
        ("a", "forward"): ModuleTiming(2, 30, 30),
        ("b", "forward"): ModuleTiming(1, 5, 5),
        ("", "forward"): ModuleTiming(1, 70, 35),
        ("b", "backward"): ModuleTiming(1, 8, 8),
        ("", "backward"): ModuleTiming(1, 20, 12),
    }
    assert not agg.pending


def test_steps_tile_time_and_epochs_tag_them() -> None:
    agg = StepAggregator(NAMES)
    done = agg.feed([(a, 10, FWD_PRE), (a, 20, FWD_POST), (None, 30, STEP), (2, 35, EPOCH)])
    done += agg.feed([(a, 40, FWD_PRE), (a, 45, FWD_POST), (None, 50, STEP)])
    assert [(r.step, r.epoch, r.start_ns, r.end_ns) for r in done] == [
        (0, 0, 10, 30),
        (1, 2, 30, 50),
    ]
    agg.feed([(b, 60, FWD_PRE), (b, 61, FWD_POST)])
    assert agg.pending
    last = agg.finish_pending(70)
    assert last is not None
    assert (last.step, last.start_ns, last.end_ns) == (2, 50, 70)
    assert last.modules == {("b", "forward"): ModuleTiming(1, 1, 1)}
    assert agg.finish_pending(80) is None


def test_exit_on_exception_closes_skipped_frames() -> None:
    # Forward of b raised inside a: torch calls the always_call post-hooks of b, then a.
    agg = StepAggregator(NAMES)
    agg.feed([(a, 0, FWD_PRE), (b, 1, FWD_PRE), (b, 4, FWD_POST), (a, 9, FWD_POST)])
    record = agg.finish_pending(10)
    assert record is not None
    assert record.modules == {
        ("b", "forward"): ModuleTiming(1, 3, 3),
        ("a", "forward"): ModuleTiming(1, 9, 6),
    }
    # An exit whose enter never came (hooks installed mid-call) is counted, not guessed.
    agg.feed([(b, 20, FWD_POST), (a, 21, FWD_PRE), (b, 22, FWD_PRE), (a, 30, FWD_POST)])
    assert (agg.unmatched_exits, agg.unclosed_enters) == (1, 1)


def test_retime_restarts_the_open_call_and_the_first_step() -> None:
    agg = StepAggregator(NAMES)
    agg.feed([(root, 100, FWD_PRE), (root, 500, RETIME), (a, 510, FWD_PRE), (a, 520, FWD_POST)])
    (record,) = agg.feed([(root, 530, FWD_POST), (None, 540, STEP)])
    assert record.start_ns == 500
    assert record.modules[("", "forward")] == ModuleTiming(1, 30, 20)


def test_step_points_follow_the_wire_contract() -> None:
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 1_000, FWD_PRE),
            (a, 1_500, FWD_PRE),
            (a, 2_000, FWD_POST),
            (root, 3_000, FWD_POST),
            (None, 4_000, STEP),
        ]
    )
    tags = {"experiment": "e", "run": "r", "rank": "1"}
    points = step_points(record, tags, offset_ns=10**18)
    assert points == [
        Point(
            "nrg_step",
            {**tags, "epoch": "0"},
            {
                "step": 0,
                "start_time_ns": 10**18 + 1_000,
                "end_time_ns": 10**18 + 4_000,
                "duration_seconds": 3e-6,
            },
            10**18 + 4_000,
        ),
        Point(
            "nrg_module",
            {**tags, "epoch": "0", "module": "a", "phase": "forward"},
            {
                "step": 0,
                "calls": 1,
                "inclusive_seconds": 5e-7,
                "exclusive_seconds": 5e-7,
            },
            10**18 + 4_000,
        ),
        Point(
            "nrg_module",
            {**tags, "epoch": "0", "module": "(root)", "phase": "forward"},
            {
                "step": 0,
                "calls": 1,
                "inclusive_seconds": 2e-6,
                "exclusive_seconds": 1.5e-6,
            },
            10**18 + 4_000,
        ),
    ]


def _steps_over_epochs(agg: StepAggregator) -> list[StepRecord]:
    return agg.feed(
        [
            (a, 100, FWD_PRE),
            (a, 200, FWD_POST),
            (32, 300, STEP),
            (12, 350, EPOCH),
            (a, 400, FWD_PRE),
            (a, 450, FWD_POST),
            (None, 500, STEP),
        ]
    )


def test_epoch_is_a_tag_and_samples_a_field_of_steps() -> None:
    records = _steps_over_epochs(StepAggregator(NAMES, samples_per_step=8))
    assert [(r.step, r.epoch, r.samples) for r in records] == [(0, 0, 32), (1, 12, 8)]
    pts = [p for r in records for p in step_points(r, {"run": "r"}, 0)]
    assert [(p.measurement, p.tags, p.fields.get("samples")) for p in pts] == [
        ("nrg_step", {"run": "r", "epoch": "0"}, 32),
        ("nrg_module", {"run": "r", "epoch": "0", "module": "a", "phase": "forward"}, None),
        ("nrg_step", {"run": "r", "epoch": "12"}, 8),
        ("nrg_module", {"run": "r", "epoch": "12", "module": "a", "phase": "forward"}, None),
    ]
    assert all("epoch" not in p.fields for p in pts)
    assert [p.fields["step"] for p in pts] == [0, 0, 1, 1]


def test_steps_without_samples_have_no_samples_field() -> None:
    records = _steps_over_epochs(StepAggregator(NAMES))
    assert [r.samples for r in records] == [32, None]
    (step,) = [p for p in step_points(records[1], {}, 0) if p.measurement == "nrg_step"]
    assert "samples" not in step.fields


def test_step_lines_are_the_encoded_step_points_across_epochs() -> None:
    records = _steps_over_epochs(StepAggregator(NAMES))
    tags = {"experiment": "e x", "run": "r,1"}
    lines = StepLines(tags, 10**18)
    text = "".join(lines.lines(r) for r in records)
    expected = LineEncoder().encode_many(p for r in records for p in step_points(r, tags, 10**18))
    assert text == expected


def test_epoch_numbering_without_arguments(private_dirs: object) -> None:
    from torch import nn

    from acquisition.torch import instrument

    session = instrument(nn.Linear(2, 2), run="epochs", graph=False)
    assert [session.epoch(), session.epoch(), session.epoch(7), session.epoch()] == [0, 1, 7, 8]


def test_step_lines_are_the_encoded_step_points() -> None:
    from acquisition.lineproto import LineEncoder

    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 1_000, FWD_PRE),
            (a, 1_500, FWD_PRE),
            (a, 2_000, FWD_POST),
            (root, 3_000, FWD_POST),
            (b, 3_100, BWD_PRE),
            (b, 3_333, BWD_POST),
            (None, 4_000, STEP),
        ]
    )
    record.modules[("a", "forward")].gpu_exclusive_ms = 0.25
    record.modules[("a", "forward")].gpu_inclusive_ms = 0.5
    tags = {"experiment": "e x", "run": "r,1", "rank": "0"}  # escaping goes through the encoder
    expected = LineEncoder().encode_many(step_points(record, tags, offset_ns=10**18))
    assert StepLines(tags, 10**18).lines(record) == expected
    assert expected.count("\n") == 4


def test_enters_without_an_exit_counted_by_the_frames_skipped() -> None:
    """Guards: an exit that skips frames (their exits never came) counts exactly the frames
    above its own, whatever lies below it. Stack root, a, b: a's exit skips b (1); later
    root, a, b, c: a's exit skips b and c (2); 1 + 2 = 3, no exit without an enter. The exits
    that skip frames still time their own calls: a 1–5 and 6–9, 4 + 3 = 7 ns, all its own (the
    skipped calls never ended); root 0–10, 10 − 7 = 3 ns its own; b and c not timed."""
    c = M("c")
    agg = StepAggregator({**NAMES, c: "c"})
    agg.feed([(root, 0, FWD_PRE), (a, 1, FWD_PRE), (b, 2, FWD_PRE), (a, 5, FWD_POST)])
    assert (agg.unmatched_exits, agg.unclosed_enters) == (0, 1)
    agg.feed([(a, 6, FWD_PRE), (b, 7, FWD_PRE), (c, 8, FWD_PRE), (a, 9, FWD_POST)])
    (record,) = agg.feed([(root, 10, FWD_POST), (None, 11, STEP)])
    assert (agg.unmatched_exits, agg.unclosed_enters) == (0, 3)
    assert record.modules == {
        ("a", "forward"): ModuleTiming(2, 7, 7),
        ("", "forward"): ModuleTiming(1, 10, 3),
    }


def test_a_gpu_interval_with_one_end_unknown_is_left_out_of_the_step() -> None:
    """Guards: a step's GPU interval is sent only with both ends (the attribution needs both);
    a step whose GPU start or end is unknown carries neither field, in both encodings."""
    records = [
        StepRecord(0, 0, 1_000, 4_000, gpu_end_ns=5_000),  # start unknown
        StepRecord(1, 0, 4_000, 9_000, gpu_start_ns=5_000),  # end unknown
        StepRecord(2, 0, 9_000, 12_000, gpu_start_ns=10_000, gpu_end_ns=13_000),
    ]
    # duration_seconds by hand: 3000 ns = 3e-06 s, 5000 ns = 5e-06 s
    expected = (
        "nrg_step,epoch=0,run=r step=0i,start_time_ns=1000i,end_time_ns=4000i,"
        "duration_seconds=3e-06 4000\n"
        "nrg_step,epoch=0,run=r step=1i,start_time_ns=4000i,end_time_ns=9000i,"
        "duration_seconds=5e-06 9000\n"
        "nrg_step,epoch=0,run=r step=2i,start_time_ns=9000i,end_time_ns=12000i,"
        "duration_seconds=3e-06,gpu_start_time_ns=10000i,gpu_end_time_ns=13000i 12000\n"
    )
    lines = StepLines({"run": "r"}, 0)
    assert "".join(lines.lines(r) for r in records) == expected
    points = [p for r in records for p in step_points(r, {"run": "r"}, 0)]
    assert LineEncoder().encode_many(points) == expected


def test_a_step_aggregated_in_slices_counts_each_event_once() -> None:
    """Guards: a step worked through in slices (``spread``: the GPU has run it, its events are
    spread over later boundaries) gives the same figures as read at once, each event read
    once: the root's forward encloses 201 calls of ``a``, 5 ns each, 20 ns apart."""
    calls = 201
    events: list[tuple[object, int, int]] = [(root, 0, FWD_PRE)]
    for i in range(calls):
        events += [(a, 100 + 20 * i, FWD_PRE), (a, 105 + 20 * i, FWD_POST)]
    end = 100 + 20 * calls  # 4120
    events += [(root, end, FWD_POST), (None, end + 10, STEP)]
    # By hand: a 201 × 5 = 1005 ns; the root 4120 ns, of which 4120 - 1005 = 3115 its own.
    expected = {
        ("a", "forward"): ModuleTiming(201, 1005, 1005),
        ("", "forward"): ModuleTiming(1, 4120, 3115),
    }
    (whole,) = StepAggregator(NAMES).feed(events)
    assert whole.modules == expected
    sliced = StepAggregator(NAMES)
    # 405 events, two boundaries to spread over: a first slice of ⌈405 / 2⌉ = 203 events.
    records = sliced.feed(events, max_steps=1, spread=2)
    assert not records and sliced.pending
    for _ in range(5):
        records += sliced.feed([], max_steps=1, spread=2)
    (record,) = records
    assert (record.start_ns, record.end_ns, record.modules) == (0, 4130, expected)
    assert (sliced.unclosed_enters, sliced.unmatched_exits) == (0, 0)


def test_no_step_finished_on_the_gpu_holds_every_event() -> None:
    """Guards: with no step boundary reached on the GPU (``max_steps=0``) every event waits,
    the boundary too, and none is counted twice when the GPU gets there: one step of ``a``
    (10 → 30 ns) ending at 40 ns."""
    agg = StepAggregator(NAMES)
    events = [(a, 10, FWD_PRE), (a, 30, FWD_POST), (None, 40, STEP)]
    assert agg.feed(events, max_steps=0) == []
    (record,) = agg.feed([], max_steps=1)
    assert (record.step, record.start_ns, record.end_ns) == (0, 10, 40)
    assert record.modules == {("a", "forward"): ModuleTiming(1, 20, 20)}


class _Reached:
    """A CUDA event the GPU has reached, at ``ns`` on its own clock."""

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def query(self) -> bool:
        return True


class _Anchor:
    """What maps the GPU's clock to the host's: here an offset."""

    def __init__(self, offset_ns: int) -> None:
        self.offset_ns = offset_ns


def test_a_steps_gpu_end_is_read_through_its_own_anchor() -> None:
    """Guards: a step boundary's CUDA event is read with the anchor recorded beside it (the
    clocks' offset of that moment), and without one when none was recorded; each step's GPU
    start is the step before's GPU end. By hand: step 0 ends at 1000 + 5000 = 6000 ns, step 1
    at 2000 + 7000 = 9000 ns (from 6000), step 2 at 3000 with no anchor (from 9000)."""
    agg = StepAggregator(NAMES)
    agg.gpu_time = lambda event, anchor: event.ns + (anchor.offset_ns if anchor else 0)
    events = [
        (a, 10, FWD_PRE),
        (a, 30, FWD_POST),
        (None, 40, STEP, _Reached(1000), _Anchor(5000)),
        (a, 50, FWD_PRE),
        (a, 60, FWD_POST),
        (None, 70, STEP, _Reached(2000), _Anchor(7000)),
        (None, 80, STEP, _Reached(3000)),
    ]
    records = agg.feed(events)
    assert [(r.gpu_start_ns, r.gpu_end_ns) for r in records] == [
        (None, 6000),
        (6000, 9000),
        (9000, 3000),
    ]


def test_a_module_removed_from_the_model_leaves_the_others_of_its_step() -> None:
    """Guards: a module that ran in a step and was removed from the model before the step
    ended (its name gone) is left out of that step, and only it: ``b`` (20 ns) and the root
    (40 ns, 40 − 10 − 20 = 10 its own) keep their figures; ``a`` ran first."""
    names = dict(NAMES)
    agg = StepAggregator(names)
    assert not agg.feed(
        [
            (root, 0, FWD_PRE),
            (a, 5, FWD_PRE),
            (a, 15, FWD_POST),
            (b, 15, FWD_PRE),
            (b, 35, FWD_POST),
            (root, 40, FWD_POST),
        ]
    )
    del names[a]
    (record,) = agg.feed([(None, 50, STEP)])
    assert record.modules == {
        ("b", "forward"): ModuleTiming(1, 20, 20),
        ("", "forward"): ModuleTiming(1, 40, 10),
    }


def test_each_slice_of_lines_is_its_share_of_those_queued_or_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guards: with ``spread`` each take formats ⌈queued lines / spread⌉ lines, or the floor
    (``PROCESS_SLICE``, 4 here) when that is fewer, never less while lines wait: three steps of
    nine modules, 3 × (1 + 9) = 30 lines, spread over 3: ⌈30/3⌉ = 10, then ⌈20/3⌉ = 7,
    ⌈13/3⌉ = 5, then max(4, ⌈8/3⌉ = 3) = 4 and the last 4: in order, none lost or twice."""
    monkeypatch.setattr(steps_module, "PROCESS_SLICE", 4)
    modules = {(f"m{i}", "forward"): ModuleTiming(1, 10 + i, 10 + i) for i in range(9)}
    records = [StepRecord(k, 0, 100 * k, 100 * k + 50, dict(modules)) for k in range(3)]
    lines = StepLines({"run": "r"}, 0)
    lines.queue(records)
    chunks = []
    while lines.queued:
        chunks.append(lines.take(spread=3))
    assert [c.count("\n") for c in chunks] == [10, 7, 5, 4, 4]
    assert "".join(chunks) == "".join(StepLines({"run": "r"}, 0).lines(r) for r in records)


def test_step_lines_hold_flat_memory_over_many_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards: the step lines keep the series prefixes of the current epoch only (epochs do not
    come back), so a long run's memory stays flat however many epochs it runs. With the encoder
    holding at most 8 series, 40 more epochs (a step of 4 modules each: 5 series an epoch) leave
    under 24 KiB more allocated; keeping every epoch's prefixes would hold 40 × 5 = 200 more,
    each a line head of about 50 characters and its key, over 32 KiB."""
    monkeypatch.setattr(steps_module, "LineEncoder", partial(LineEncoder, series_cache=8))
    modules = {(f"m{i}", "forward"): ModuleTiming(1, 10, 10) for i in range(4)}
    lines = StepLines({"run": "r"}, 0)

    def epochs(first: int, count: int) -> None:
        for e in range(first, first + count):
            assert lines.lines(StepRecord(e, e, 100 * e, 100 * e + 50, modules)).count("\n") == 5

    epochs(0, 10)  # the encoder's 8 series taken
    tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        epochs(10, 40)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not tracing:
            tracemalloc.stop()
    assert held < 24 * 1024
