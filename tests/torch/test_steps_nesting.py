"""The step aggregator with three levels of nesting, a resume inside a step, GPU times, and
steps held until the GPU reaches their boundary."""

from __future__ import annotations

from acquisition.lineproto import LineEncoder
from acquisition.torch.hooks import FWD_POST, FWD_PRE, RESUME, RETIME, STEP
from acquisition.torch.steps import (
    ROOT_NAME,
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


root, block, leaf = M("root"), M("block"), M("leaf")
NAMES = {root: "", block: "block", leaf: "block.leaf"}


def gpu_ms(record: StepRecord) -> dict[str, tuple[float | None, float | None]]:
    """Each module's (inclusive, exclusive) GPU milliseconds in ``record``, by its name."""
    return {k[0]: (t.gpu_inclusive_ms, t.gpu_exclusive_ms) for k, t in record.modules.items()}


def test_exclusive_time_subtracts_children_not_grandchildren_twice() -> None:
    """Guards: root (0–100) holds block (10–80) which holds leaf (20–50). Exclusive times:
    leaf 30; block 70 − 30 = 40; root 100 − 70 = 30 (its child's inclusive time; the leaf is
    inside the block, so it is neither added back nor subtracted again)."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE),
            (block, 10, FWD_PRE),
            (leaf, 20, FWD_PRE),
            (leaf, 50, FWD_POST),
            (block, 80, FWD_POST),
            (root, 100, FWD_POST),
            (None, 110, STEP),
        ]
    )
    assert record.modules == {
        ("block.leaf", "forward"): ModuleTiming(1, 30, 30),
        ("block", "forward"): ModuleTiming(1, 70, 40),
        ("", "forward"): ModuleTiming(1, 100, 30),
    }
    exclusive = sum(t.exclusive_ns for t in record.modules.values())
    assert exclusive == 100  # the exclusive times tile root's 100 ns


def test_a_resume_moves_the_start_only_of_a_step_with_no_calls_yet() -> None:
    """Guards: a resume (the clock restarting after a pause) right after a boundary moves the
    next step's start (30 → 35); one after module calls in the same step does not (the step
    began at 60 with the call at 62, so a resume at 70 leaves it at 60)."""
    agg = StepAggregator(NAMES)
    done = agg.feed([(leaf, 10, FWD_PRE), (leaf, 20, FWD_POST), (None, 30, STEP)])
    done += agg.feed([(None, 35, RESUME), (leaf, 40, FWD_PRE), (leaf, 45, FWD_POST)])
    done += agg.feed([(None, 60, STEP), (leaf, 62, FWD_PRE), (leaf, 64, FWD_POST)])
    done += agg.feed([(None, 70, RESUME), (leaf, 72, FWD_PRE), (leaf, 74, FWD_POST)])
    done += agg.feed([(None, 90, STEP)])
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 10, 30), (1, 35, 60), (2, 60, 90)]


def test_a_retime_after_calls_in_the_step_keeps_the_step_start() -> None:
    """Guards: a retime (a module's enter timed again, e.g. after a first call's compilation)
    restarts that call's clock, and the step's start only while the step has no calls yet: the
    step began at 30 with calls at 40–45, so the retime at 60 leaves it at 30; the root's call
    counts from 60 to 70, 10 ns."""
    agg = StepAggregator(NAMES)
    done = agg.feed([(leaf, 10, FWD_PRE), (leaf, 20, FWD_POST), (None, 30, STEP)])
    done += agg.feed([(leaf, 40, FWD_PRE), (leaf, 45, FWD_POST), (root, 50, FWD_PRE)])
    done += agg.feed([(root, 60, RETIME), (root, 70, FWD_POST), (None, 80, STEP)])
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 10, 30), (1, 30, 80)]
    assert done[1].modules[("", "forward")] == ModuleTiming(1, 10, 10)


class Event:
    """Stands for a CUDA event the GPU has reached at ``ms`` on its clock."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def elapsed_time(self, end: Event) -> float:
        return end.ms - self.ms


def test_gpu_time_sums_every_call_of_a_module_and_leaves_children_out() -> None:
    """Guards: a module called twice in a step gets both calls' GPU time (inclusive and
    exclusive), and its parent's exclusive GPU time leaves its children out. On the GPU the root
    runs 0–10 ms and the leaf 1–3 ms and 4–7 ms: leaf 2 + 3 = 5 ms inclusive and exclusive;
    root 10 ms inclusive, 10 − 5 = 5 ms exclusive. In the points, seconds: 0.005 each."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE, Event(0.0)),
            (leaf, 10, FWD_PRE, Event(1.0)),
            (leaf, 20, FWD_POST, Event(3.0)),
            (leaf, 30, FWD_PRE, Event(4.0)),
            (leaf, 40, FWD_POST, Event(7.0)),
            (root, 50, FWD_POST, Event(10.0)),
            (None, 60, STEP),
        ]
    )
    leaf_t, root_t = record.modules[("block.leaf", "forward")], record.modules[("", "forward")]
    assert (leaf_t.calls, leaf_t.gpu_inclusive_ms, leaf_t.gpu_exclusive_ms) == (2, 5.0, 5.0)
    assert (root_t.gpu_inclusive_ms, root_t.gpu_exclusive_ms) == (10.0, 5.0)
    fields = {p.tags["module"]: p.fields for p in step_points(record, {}, 0)[1:]}
    assert fields["block.leaf"]["gpu_seconds"] == 0.005
    assert fields["block.leaf"]["gpu_inclusive_seconds"] == 0.005
    assert (fields[ROOT_NAME]["gpu_seconds"], fields[ROOT_NAME]["gpu_inclusive_seconds"]) == (
        0.005,
        0.01,
    )


def test_gpu_exclusive_time_subtracts_children_not_grandchildren() -> None:
    """Guards: with three levels on the GPU each call's exclusive GPU time leaves out only its
    own children: root 0–10 ms holds block 1–8 ms, which holds leaf 2–5 ms, then root calls
    leaf again directly at 8.5–9.5 ms. Leaf 3 + 1 = 4 ms; block 7 − 3 = 4 ms; root
    10 − 7 − 1 = 2 ms (the first leaf is inside the block, not subtracted from root again):
    the exclusive times tile root's 10 ms."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE, Event(0.0)),
            (block, 10, FWD_PRE, Event(1.0)),
            (leaf, 20, FWD_PRE, Event(2.0)),
            (leaf, 30, FWD_POST, Event(5.0)),
            (block, 40, FWD_POST, Event(8.0)),
            (leaf, 50, FWD_PRE, Event(8.5)),
            (leaf, 60, FWD_POST, Event(9.5)),
            (root, 70, FWD_POST, Event(10.0)),
            (None, 80, STEP),
        ]
    )
    gpu = gpu_ms(record)
    assert gpu == {"block.leaf": (4.0, 4.0), "block": (7.0, 4.0), "": (10.0, 2.0)}


def test_a_retime_restarts_only_the_call_it_names() -> None:
    """Guards: a retime restarts the call at the top of the stack it names, not a frame below
    it. block's call (from 5) is still open below root's; root's retime at 60 makes root's call
    60–70 = 10 ns; block's call stays 5–90 = 85 ns, 85 − 10 = 75 ns its own. A retime of a
    module not on top (leaf at 65) changes no call, nor the step's start once it has calls."""
    agg = StepAggregator(NAMES)
    agg.feed([(leaf, 1, FWD_PRE), (leaf, 2, FWD_POST), (block, 5, FWD_PRE), (root, 50, FWD_PRE)])
    agg.feed([(root, 60, RETIME), (leaf, 65, RETIME), (root, 70, FWD_POST)])
    (record,) = agg.feed([(block, 90, FWD_POST), (None, 95, STEP)])
    assert record.modules[("", "forward")] == ModuleTiming(1, 10, 10)
    assert record.modules[("block", "forward")] == ModuleTiming(1, 85, 75)
    assert (record.start_ns, record.end_ns) == (1, 95)


class Boundary(Event):
    """A step boundary's CUDA event: ``query()`` says whether the GPU has reached it."""

    def __init__(self, ms: float, reached: bool = False) -> None:
        super().__init__(ms)
        self.reached = reached

    def query(self) -> bool:
        return self.reached


def test_a_step_waits_until_the_gpu_reaches_its_boundary() -> None:
    """Guards: a step whose boundary the GPU has not reached yet is held back with everything
    after it; once reached, it comes out with its own start and end, and the next step starts
    at that boundary: steps 10–30 and 30–60, the leaf's call 10 ns in the first, 5 ns in the
    second (not one step 10–60 with both calls)."""
    agg = StepAggregator(NAMES)
    first = Boundary(3.0)
    held = agg.feed(
        [
            (leaf, 10, FWD_PRE),
            (leaf, 20, FWD_POST),
            (None, 30, STEP, first),
            (leaf, 40, FWD_PRE),
            (leaf, 45, FWD_POST),
        ]
    )
    assert held == []
    first.reached = True
    done = agg.feed([(None, 60, STEP, Boundary(6.0, reached=True))])
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 10, 30), (1, 30, 60)]
    leaf_calls = [r.modules[("block.leaf", "forward")] for r in done]
    assert [(t.calls, t.inclusive_ns) for t in leaf_calls] == [(1, 10), (1, 5)]
    assert agg.unmatched_exits == 0  # the exit before the held boundary is read once


def test_consecutive_boundaries_held_for_the_gpu_each_end_one_step() -> None:
    """Guards: steps without module detail are two boundaries in a row; when the GPU has
    reached the first (30) and not the second (50), the first step comes out and the second
    waits; once reached, it comes out alone, and the next ends at 70: steps 10–30, 30–50 and
    50–70, three in all (not a repeat of the boundary at 30 as an extra, empty step)."""
    agg = StepAggregator(NAMES)
    second = Boundary(5.0)
    done = agg.feed(
        [
            (leaf, 10, FWD_PRE),
            (leaf, 20, FWD_POST),
            (None, 30, STEP, Boundary(3.0, reached=True)),
            (None, 50, STEP, second),
        ]
    )
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 10, 30)]
    second.reached = True
    done += agg.feed([(None, 70, STEP, Boundary(7.0, reached=True))])
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 10, 30), (1, 30, 50), (2, 50, 70)]
    assert [r.modules for r in done[1:]] == [{}, {}]


def test_a_call_without_gpu_time_reports_zero_seconds_on_the_gpu() -> None:
    """Guards: a module whose call launched nothing (both of its CUDA events at 2 ms on the GPU)
    has 0 s of GPU time, exclusive and inclusive, beside its parent's 0–10 ms: 0.01 s inclusive
    and 10 − 0 = 10 ms = 0.01 s exclusive; the fast step lines say the same."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE, Event(0.0)),
            (leaf, 10, FWD_PRE, Event(2.0)),
            (leaf, 20, FWD_POST, Event(2.0)),
            (root, 50, FWD_POST, Event(10.0)),
            (None, 60, STEP),
        ]
    )
    points = step_points(record, {"run": "r"}, 0)
    fields = {p.tags["module"]: p.fields for p in points[1:]}
    assert (fields["block.leaf"]["gpu_seconds"], fields["block.leaf"]["gpu_inclusive_seconds"]) == (
        0.0,
        0.0,
    )
    assert (fields[ROOT_NAME]["gpu_seconds"], fields[ROOT_NAME]["gpu_inclusive_seconds"]) == (
        0.01,
        0.01,
    )
    assert StepLines({"run": "r"}, 0).lines(record) == LineEncoder().encode_many(points)


class NotReady(Event):
    """Stands for a CUDA event recorded on another stream: reading it raises, as CUDA does."""

    def elapsed_time(self, end: Event) -> float:
        raise RuntimeError("CUDA error: device not ready")


def test_calls_whose_gpu_time_cannot_be_read_are_counted_and_get_none() -> None:
    """Guards: a call whose CUDA events cannot be read (on another stream) gets no GPU time and
    is counted in ``gpu_unresolved``, and so is its parent, whose exclusive time would need the
    child's; a sibling read normally keeps its own: root 0–10 ms holds leaf (unreadable) and
    block 4–6 ms: block 6 − 4 = 2 ms inclusive and exclusive; leaf and root none, 2 counted."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE, Event(0.0)),
            (leaf, 10, FWD_PRE, NotReady(1.0)),
            (leaf, 20, FWD_POST, Event(3.0)),
            (block, 30, FWD_PRE, Event(4.0)),
            (block, 40, FWD_POST, Event(6.0)),
            (root, 50, FWD_POST, Event(10.0)),
            (None, 60, STEP),
        ]
    )
    gpu = gpu_ms(record)
    assert gpu == {"block.leaf": (None, None), "block": (2.0, 2.0), "": (None, None)}
    assert agg.gpu_unresolved == 2
    fields = {p.tags["module"]: p.fields for p in step_points(record, {}, 0)[1:]}
    assert fields["block"]["gpu_seconds"] == 0.002
    assert "gpu_seconds" not in fields["block.leaf"]
    assert "gpu_seconds" not in fields[ROOT_NAME]


class Gpu:
    """Stands for the GPU's progress: the time on its clock it has run up to, in ms."""

    def __init__(self) -> None:
        self.now = 0.0


class Queued(Event):
    """A CUDA event recorded at ``ms``: reached once the GPU's clock gets there; reading it (or a
    pair ending at an event not reached) before that raises, as CUDA does."""

    def __init__(self, gpu: Gpu, ms: float) -> None:
        super().__init__(ms)
        self.gpu = gpu

    def query(self) -> bool:
        return self.gpu.now >= self.ms

    def elapsed_time(self, end: Event) -> float:
        if self.gpu.now < max(self.ms, end.ms):
            raise RuntimeError("CUDA error: device not ready")
        return end.ms - self.ms


def test_steps_the_gpu_has_not_run_wait_and_come_out_whole_once_it_has() -> None:
    """Guards: fed up to the boundaries the GPU has reached (``max_steps``, as on CUDA), each step
    comes out once the GPU has run it, with its own calls and GPU times, and the events after it
    wait unread, none lost or read twice. Step 0: root 0–30 ns holds leaf 10–20 ns; on the GPU
    root 1–5 ms, leaf 2–4 ms: root 4 ms, 4 − 2 = 2 ms its own, leaf 2 ms. Step 1 has no module
    call (two boundaries in a row). Step 2: root 60–90 ns holds leaf 70–80 ns, 30 ns and
    30 − 10 = 20 ns its own; on the GPU root 8–11 ms, leaf 8.5–10 ms: root 3 ms, 3 − 1.5 = 1.5
    ms its own, leaf 1.5 ms (step 0's GPU times not added again). On the GPU's clock the steps
    tile time from the first event: 1–6, 6–7 and 7–12 ms (step 2 from step 1's end, not from its
    own first event at 8 ms)."""
    gpu = Gpu()
    agg = StepAggregator(NAMES)
    agg.gpu_time = lambda event, anchor: round(event.ms * 1e6)  # ms on the GPU's clock, in ns
    events = [
        (root, 0, FWD_PRE, Queued(gpu, 1.0)),
        (leaf, 10, FWD_PRE, Queued(gpu, 2.0)),
        (leaf, 20, FWD_POST, Queued(gpu, 4.0)),
        (root, 30, FWD_POST, Queued(gpu, 5.0)),
        (None, 40, STEP, Queued(gpu, 6.0)),
        (None, 50, STEP, Queued(gpu, 7.0)),
        (root, 60, FWD_PRE, Queued(gpu, 8.0)),
        (leaf, 70, FWD_PRE, Queued(gpu, 8.5)),
        (leaf, 80, FWD_POST, Queued(gpu, 10.0)),
        (root, 90, FWD_POST, Queued(gpu, 11.0)),
        (None, 100, STEP, Queued(gpu, 12.0)),
    ]
    gpu.now = 6.0  # the GPU has reached the first boundary only
    done = agg.feed(events, max_steps=1)
    assert len(done) == 1 and agg.waiting
    gpu.now = 7.0
    done += agg.feed([], max_steps=1)
    gpu.now = 12.0
    done += agg.feed([], max_steps=1)
    assert not agg.waiting and not agg.pending
    assert [(r.step, r.start_ns, r.end_ns) for r in done] == [(0, 0, 40), (1, 40, 50), (2, 50, 100)]
    assert [(r.gpu_start_ns, r.gpu_end_ns) for r in done] == [
        (1_000_000, 6_000_000),
        (6_000_000, 7_000_000),
        (7_000_000, 12_000_000),
    ]
    assert done[0].modules == {
        ("block.leaf", "forward"): ModuleTiming(1, 10, 10, 2.0, 2.0),
        ("", "forward"): ModuleTiming(1, 30, 20, 4.0, 2.0),
    }
    assert done[1].modules == {}
    assert done[2].modules == {
        ("block.leaf", "forward"): ModuleTiming(1, 10, 10, 1.5, 1.5),
        ("", "forward"): ModuleTiming(1, 30, 20, 3.0, 1.5),
    }
    assert (agg.gpu_unresolved, agg.unmatched_exits, agg.unclosed_enters) == (0, 0, 0)


def test_calls_fed_before_the_gpu_ran_them_are_read_when_their_step_ends() -> None:
    """Guards: calls fed without ``max_steps`` (every recorded event at once, as when too many
    wait) before the GPU has run them are read only when their step's boundary is reached, not
    as they are fed: root 0–30 ns on the GPU 1–5 ms holds leaf 2–4 ms: root 4 ms, 4 − 2 = 2 ms its
    own, leaf 2 ms; nothing counted as unreadable."""
    gpu = Gpu()
    agg = StepAggregator(NAMES)
    events = [
        (root, 0, FWD_PRE, Queued(gpu, 1.0)),
        (leaf, 10, FWD_PRE, Queued(gpu, 2.0)),
        (leaf, 20, FWD_POST, Queued(gpu, 4.0)),
        (root, 30, FWD_POST, Queued(gpu, 5.0)),
        (None, 40, STEP, Queued(gpu, 6.0)),
    ]
    assert agg.feed(events) == [] and agg.waiting
    gpu.now = 6.0
    (record,) = agg.feed([])
    assert record.modules == {
        ("block.leaf", "forward"): ModuleTiming(1, 10, 10, 2.0, 2.0),
        ("", "forward"): ModuleTiming(1, 30, 20, 4.0, 2.0),
    }
    assert agg.gpu_unresolved == 0


def test_gpu_exclusive_time_after_a_direct_child_then_a_nested_one() -> None:
    """Guards: each call's children are kept on its own frame, whatever the frames below it hold:
    root 0–10 ms calls leaf 1–2 ms directly, then block 3–8 ms, which calls leaf 4–6 ms. Leaf
    1 + 2 = 3 ms; block 5 − 2 = 3 ms its own; root 10 − 1 − 5 = 4 ms its own: the exclusive
    times tile root's 10 ms."""
    agg = StepAggregator(NAMES)
    (record,) = agg.feed(
        [
            (root, 0, FWD_PRE, Event(0.0)),
            (leaf, 10, FWD_PRE, Event(1.0)),
            (leaf, 20, FWD_POST, Event(2.0)),
            (block, 30, FWD_PRE, Event(3.0)),
            (leaf, 40, FWD_PRE, Event(4.0)),
            (leaf, 50, FWD_POST, Event(6.0)),
            (block, 60, FWD_POST, Event(8.0)),
            (root, 70, FWD_POST, Event(10.0)),
            (None, 80, STEP),
        ]
    )
    gpu = gpu_ms(record)
    assert gpu == {"block.leaf": (3.0, 3.0), "block": (5.0, 3.0), "": (10.0, 4.0)}
    assert agg.gpu_unresolved == 0


def test_a_resume_starts_the_next_step_on_the_gpu_at_its_own_event() -> None:
    """Guards: on CUDA a resume carries a CUDA event; a step with no call yet then starts on the
    GPU there, not at the step before's end (the pause is nobody's step). Step 0 ends on the GPU
    at 6 ms, the resume's event is at 9 ms, step 1 ends at 12 ms: step 1 runs 9–12 ms on the
    GPU (and 50–80 ns on the host, from the resume)."""
    gpu = Gpu()
    gpu.now = 12.0  # everything has run
    agg = StepAggregator(NAMES)
    agg.gpu_time = lambda event, anchor: round(event.ms * 1e6)  # ms on the GPU's clock, in ns
    done = agg.feed(
        [
            (leaf, 0, FWD_PRE, Queued(gpu, 1.0)),
            (leaf, 10, FWD_POST, Queued(gpu, 2.0)),
            (None, 40, STEP, Queued(gpu, 6.0)),
            (None, 50, RESUME, Queued(gpu, 9.0)),
            (leaf, 60, FWD_PRE, Queued(gpu, 10.0)),
            (leaf, 70, FWD_POST, Queued(gpu, 11.0)),
            (None, 80, STEP, Queued(gpu, 12.0)),
        ]
    )
    assert [(r.start_ns, r.end_ns, r.gpu_start_ns, r.gpu_end_ns) for r in done] == [
        (0, 40, 1_000_000, 6_000_000),
        (50, 80, 9_000_000, 12_000_000),
    ]
