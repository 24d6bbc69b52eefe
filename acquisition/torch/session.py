"""A training-job session: hooks in, steps out, model recorded once, lines to the agent.

Calls used: the global module and optimizer hooks of torch (``register_module_forward_pre_hook``,
``register_module_forward_hook``, ``torch.optim.optimizer.register_optimizer_step_post_hook``,
``register_module_module_registration_hook``), autograd-node hooks on leaf modules' outputs for
backward timing (see :mod:`acquisition.torch.hooks`), one root forward pre-hook with kwargs to
capture the first call's inputs when no example inputs were given. Clock:
``time.perf_counter_ns()`` on the hot path, converted to Unix-epoch ns with one offset measured
at start (``time.time_ns() - perf_counter_ns()``).

On CUDA (a model on one GPU) each step boundary also records one CUDA event, placed on the host
clock through anchors (:mod:`acquisition.torch.cuda`); a later step boundary (or the aggregator
thread, when none comes) reads a step's events in one batch once the GPU has reached its
boundary, never waiting for the GPU. Module
detail records a CUDA event at each module enter and exit; for a detailed step, autograd's
device threads are switched off on the training thread (``torch.autograd``'s
``set_multithreading_enabled``, which is thread-local), so the backward node hooks run on the
training thread between the kernels it launches, not as Python callbacks on autograd's CUDA
device thread. Steps without module detail have no hooks at all and keep torch's defaults.

Points (wire contract): ``nrg_run`` (start/end), ``nrg_model`` (per module, once), ``nrg_step``
and ``nrg_module`` (per step), tagged ``experiment``, ``run`` and ``rank``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acquisition.lineproto import LineEncoder
from acquisition.paths import data_dir
from acquisition.point import Point
from acquisition.torch import cuda as gpu_timeline
from acquisition.torch import launch as launching
from acquisition.torch.analysis import ModelAnalysis
from acquisition.torch.graph import GraphCapture
from acquisition.torch.hooks import EPOCH, RESUME, STEP, EventLog, ModuleHooks
from acquisition.torch.launch import resolve_tags
from acquisition.torch.steps import StepAggregator, StepLines
from acquisition.torch.transport import (
    Handover,
    LineSender,
    default_fallback_dir,
    default_socket_path,
)

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.hooks import RemovableHandle

__all__ = [
    "DETAIL_EVERY_ERROR",
    "DETAIL_MODULES",
    "PLAN_ERROR",
    "SAMPLES_ERROR",
    "Session",
    "detail_every",
    "resolve_tags",
]

log = logging.getLogger("acquisition.torch")

NO_CUDA_BACKWARD = (
    "nrg: backward of modules not timed on CUDA: %s (forward and steps are); "
    "autograd's device threads would run the hooks as Python callbacks"
)

SAMPLES_ERROR = "samples must be a positive integer (the batch size of the step), got {value!r}"
"""Raised (formatted) by :meth:`Session.step` and ``instrument(samples_per_step=...)``."""


DETAIL_MODULES = 48
"""``module_detail_every`` by default: every step for a model of up to this many modules, else
every ⌈modules / 48⌉-th step. From a budget: module detail may cost ≤ 2.25 % of a step on average
(the goal is 3 % for ``instrument()`` as a whole), and a detailed step costs about 0.047 % of a
step per module (ResNet-50 on an H200: 161 modules, +7.6 %), so ⌊2.25 / 0.047⌋ = 48 modules'
worth of detail per step."""

_CUDA_BACKLOG = 65_536
"""On CUDA, events waiting for a step boundary are aggregated anyway beyond this many (a job
that never ends a step)."""

DETAIL_EVERY_ERROR = "module_detail_every must be a positive integer, got {value!r}"
PLAN_ERROR = "{key} must be a positive integer, got {value!r}"
"""Raised (formatted) by :meth:`Session.plan` and ``instrument(epochs=..., steps_per_epoch=...)``."""


def detail_every(modules: int, requested: int | None) -> int:
    """How often a step gets per-module detail (1: every step)."""
    if requested is not None:
        if type(requested) is not int or requested <= 0:
            raise ValueError(DETAIL_EVERY_ERROR.format(value=requested))
        return requested
    return max(1, -(-modules // DETAIL_MODULES))


def _check_samples(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value <= 0:
        raise ValueError(SAMPLES_ERROR.format(value=value))
    return value


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in text)


class Session:
    """Instruments one model; see :func:`acquisition.torch.instrument` for the arguments."""

    def __init__(
        self,
        model: nn.Module,
        *,
        example_inputs: tuple[Any, ...] | None = None,
        example_kwargs: Mapping[str, Any] | None = None,
        experiment: str | None = None,
        run: str | None = None,
        rank: int | str | None = None,
        socket_path: str | os.PathLike[str] | None = None,
        fallback_dir: str | os.PathLike[str] | None = None,
        graph_dir: str | os.PathLike[str] | None = None,
        graph: bool = True,
        backward: bool = True,
        auto_step: bool = True,
        flush_interval_s: float = 0.05,
        samples_per_step: int | None = None,
        module_detail_every: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
    ) -> None:
        self.model = model
        self._samples_per_step = _check_samples(samples_per_step)
        self.module_detail_every = detail_every(
            sum(1 for _ in model.modules()), module_detail_every
        )
        """Steps with module hooks in: every Nth, counted from the first (step 0)."""
        self._steps_seen = 0
        self.pid = os.getpid()
        self.launch = launching.detect_launch(os.environ)
        self.tags = resolve_tags(experiment, run, rank, pid=self.pid, launch=self.launch)
        self.gpu_uuid = ""
        """The CUDA device UUID of the model's parameters (found at start)."""
        self._model_tags = {k: v for k, v in self.tags.items() if k != "rank"}
        stem = f"nrg-{_file_safe(self.tags['run'])}-{self.pid}"
        self.socket_path = Path(socket_path) if socket_path else default_socket_path()
        self.fallback_path = Path(fallback_dir or default_fallback_dir()) / f"{stem}.lp"
        graph_root = graph_dir or os.environ.get("NRG_GRAPH_DIR") or data_dir() / "graphs"
        graph_path = (
            Path(graph_root) / f"{stem}.graph.json"
            if graph and launching.records_graph(self.tags, self.launch)
            else None
        )
        if example_inputs is not None and not isinstance(example_inputs, tuple):
            example_inputs = (example_inputs,)
        self._example = (example_inputs, dict(example_kwargs or {}))
        self._backward = backward
        self._auto_step = auto_step
        self._flush_interval_s = flush_interval_s
        self._model_analysis = ModelAnalysis(
            model, graph_path, tags=self.tags, model_tags=self._model_tags, send=self._send
        )
        self._encoder = LineEncoder()
        self._events = EventLog()
        self._hooks: ModuleHooks | None = None
        self._handles: list[RemovableHandle] = []
        self._first_call: RemovableHandle | None = None
        self._optimizers: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self._step_optimizer: weakref.ref[Any] | None = None
        self._manual_steps = False
        self._epoch = 0
        self._epoch_marked = False
        self._names_dirty = False
        self._param_ids: set[int] = set()
        self._aggregator: StepAggregator | None = None
        self._step_lines: StepLines | None = None
        self._sender: LineSender | None = None
        self._stop = threading.Event()
        self._process_lock = threading.RLock()
        self._processed_at = 0.0
        self._process_failed = False
        self._handover: Handover | None = None
        self._cuda = False
        self._timeline: gpu_timeline.GpuTimeline | None = None
        self._boundaries: deque[Any] = deque()
        """CUDA events of the step boundaries the aggregator has not seen the GPU reach."""
        self._ready = 0
        """Steps the GPU has finished whose events are not all aggregated yet."""
        self._threads_switch: Any = None
        self._threads_before = True
        self._thread: threading.Thread | None = None
        self._started = False
        self._closed = False
        self._paused = False
        self.offset_ns = 0
        self.start_time_ns = 0
        self._plan: tuple[int, int | None] | None = None
        if epochs is not None:
            self.plan(epochs, steps_per_epoch)

    # --- public API -----------------------------------------------------------------------

    @property
    def graph_path(self) -> Path | None:
        """Where the model graph JSON is (None: off, or it could not be written)."""
        return self._model_analysis.graph_path

    @property
    def capture(self) -> GraphCapture | None:
        """The captured op graph, once the model analysis has run."""
        return self._model_analysis.capture

    @property
    def sender(self) -> LineSender:
        if self._sender is None:
            raise RuntimeError("session not started")
        return self._sender

    @property
    def backward_modules(self) -> list[str]:
        """Qualnames of the (leaf) modules whose backward is timed, in model order."""
        if self._hooks is None:
            return []
        leaves = self._hooks.backward_leaves
        return [n for n, m in self.model.named_modules() if m in leaves]

    def _leaves(self) -> list[Any]:
        return [m for m in self.model.modules() if next(m.children(), None) is None]

    def start(self) -> Session:
        """Install the hooks and start sending; returns the session (for code without ``with``)."""
        from torch.nn.modules import module as torch_module
        from torch.optim import optimizer as torch_optimizer

        if self._started:
            raise RuntimeError("session already started")
        self._started = True
        self.offset_ns = time.time_ns() - time.perf_counter_ns()
        self.start_time_ns = time.time_ns()
        model = self.model
        devices = gpu_timeline.cuda_devices(model.parameters())
        cuda = self._cuda = bool(devices)
        self.gpu_uuid = launching.cuda_uuid(model) if cuda else ""
        self._param_ids = {id(p) for p in model.parameters()}
        self._aggregator = StepAggregator(self._names(), samples_per_step=self._samples_per_step)
        if cuda:
            self._timeline = gpu_timeline.GpuTimeline(self.offset_ns)
            self._timeline.anchor()
            self._aggregator.gpu_time = self._timeline.host_ns
            self._backward = self._backward and self._backward_on_this_thread(devices)
        self._step_lines = StepLines(self.tags, self.offset_ns)
        self._hooks = ModuleHooks(self._events, cuda=cuda)
        self._aggregator.recycle = self._hooks.event_pool.append if cuda else None
        self._sender = LineSender(self.socket_path, self.fallback_path)
        self._sender.start()
        self._handover = Handover(self._sender.send)
        self._send([self._run_point("start", self.start_time_ns)])
        self._model_analysis.time_ns = self.start_time_ns
        if self._plan is not None:
            self.plan(*self._plan)
        args, kwargs = self._example
        if args is not None:
            self._model_analysis.here(args, kwargs, self._hooks)
        else:
            self._first_call = model.register_forward_pre_hook(
                self._on_first_call, with_kwargs=True
            )
            self._model_analysis.expect_first_call()
        if self._backward:
            self._hooks.set_backward(self._leaves())
        self._hooks.install_forward()
        self._device_threads(False)
        self._handles.append(torch_optimizer.register_optimizer_step_post_hook(self._on_optimizer))
        self._handles.append(
            torch_module.register_module_module_registration_hook(self._on_registration)
        )
        self._thread = threading.Thread(target=self._run, name="nrg-torch-steps", daemon=True)
        self._thread.start()
        return self

    def step(self, samples: int | None = None) -> None:
        """Mark the end of a step; from the first call on, optimizer steps no longer do.

        ``samples``: how many samples (the batch size) this step processed, written as the
        step's ``samples`` field; without it, ``samples_per_step`` of :func:`instrument`."""
        samples = _check_samples(samples)
        self._manual_steps = True
        self._boundary(samples)

    def epoch(self, number: int | None = None) -> int:
        """Set the epoch of the steps that follow and return it; without ``number`` the first
        call gives 0 and each later call the next."""
        if number is None:
            number = self._epoch + 1 if self._epoch_marked else 0
        self._epoch_marked = True
        self._epoch = int(number)
        self._events.append((self._epoch, time.perf_counter_ns(), EPOCH))
        return self._epoch

    def plan(self, epochs: int, steps_per_epoch: int | None = None) -> None:
        """Declare the run's length, for the agent's forecast at each epoch end: ``epochs`` in
        all, ``steps_per_epoch`` optimizer steps each (default: as many as the last epoch had)."""
        for key, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if (value is not None or key == "epochs") and (type(value) is not int or value <= 0):
                raise ValueError(PLAN_ERROR.format(key=key, value=value))
        self._plan = (epochs, steps_per_epoch)
        if self._sender is None:
            return  # sent at start
        fields: dict[str, str | int] = {"epochs": epochs}
        fields.update({"steps_per_epoch": steps_per_epoch} if steps_per_epoch else {})
        self._send([Point("nrg_plan", dict(self.tags), fields, time.time_ns())])

    def pause(self) -> None:
        """Stop recording (every hook out, optimizer steps ignored) until :meth:`resume`.

        Pause between steps, e.g. around evaluation, to keep that time out of every step."""
        if self._hooks is None or self._paused or self._closed:
            return
        self._paused = True
        self._hooks.remove_forward()
        self._device_threads(True)

    def resume(self) -> None:
        """Record again; a step with no module call yet starts now."""
        if self._hooks is None or not self._paused or self._closed:
            return
        self._paused = False
        self._restart_clock()
        if self._detail_step():
            self._hooks.install_forward()
            self._device_threads(False)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """``with session.paused(): evaluate()``."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        """Remove every hook, send what is left (a last partial step included), stop."""
        if not self._started or self._closed:
            return
        self._closed = True
        end_perf = time.perf_counter_ns()
        if self._first_call is not None:
            self._first_call.remove()
            self._first_call = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._hooks is not None:
            self._hooks.remove_all()
        self._device_threads(True)
        if self._model_analysis.wait():
            self._model_analysis.late(self._hooks)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._timeline is not None:
            self._timeline.synchronize()  # every boundary event reached: the steps can end
        self._process()
        assert self._aggregator is not None
        last = self._aggregator.finish_pending(end_perf)
        if last is not None and self._step_lines is not None:
            self._send_text(self._step_lines.lines(last))
        if self._aggregator.unmatched_exits or self._aggregator.unclosed_enters:
            log.info(
                "nrg: %d module exits without an enter, %d enters without an exit",
                self._aggregator.unmatched_exits,
                self._aggregator.unclosed_enters,
            )
        self._send([self._run_point("end", time.time_ns())])
        self._send_text("", now=True)
        self.sender.close()

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- hooks (training thread) ------------------------------------------------------------

    def _on_first_call(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._first_call is None:
            return
        self._first_call.remove()
        self._first_call = None
        assert self._hooks is not None
        event = self._model_analysis.first_call(module, tuple(args), dict(kwargs), self._hooks)
        if event is not None:  # analysed here: the call's clock restarts
            self._events.append(event)

    def _on_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._manual_steps or not self._auto_step or self._paused:
            return
        ours = self._optimizers.get(optimizer)
        if ours is None:
            ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
            ours = self._optimizers[optimizer] = bool(ids & self._param_ids)
        if not ours:
            return
        # With several optimizers on one model (GANs), the first one to step marks steps.
        chosen = self._step_optimizer() if self._step_optimizer is not None else None
        if chosen is None:
            self._step_optimizer = weakref.ref(optimizer)
        elif chosen is not optimizer:
            return
        self._boundary(None)

    def _restart_clock(self) -> None:
        """A step with no module call yet starts now (on CUDA, on the GPU's timeline too)."""
        if self._timeline is None:
            self._events.append((None, time.perf_counter_ns(), RESUME))
        else:
            self._events.append((None, time.perf_counter_ns(), RESUME, self._timeline.mark()[0]))

    def _boundary(self, samples: int | None) -> None:
        """A step ends now: one event (on CUDA also one CUDA event), then the next step."""
        timeline = self._timeline
        if timeline is None:
            self._events.append((samples, time.perf_counter_ns(), STEP))
            self._next_step()
            return
        perf = time.perf_counter_ns()
        event, anchor = timeline.mark()
        self._events.append((samples, perf, STEP, event, anchor))
        self._boundaries.append(event)
        self._next_step()
        if timeline.due(perf):
            timeline.anchor()

    def _backward_on_this_thread(self, devices: set[int]) -> bool:
        """Whether backward node hooks can run on the training thread (one GPU, and a torch
        that can switch autograd's device threads off for this thread); logs why not."""
        import torch

        switch = gpu_timeline.backward_thread_switch()
        if switch is None:
            log.info(NO_CUDA_BACKWARD, "this torch cannot run backward on the calling thread")
            return False
        if len(devices) > 1:
            log.info(NO_CUDA_BACKWARD, f"the model spans {len(devices)} GPUs")
            return False
        self._threads_switch = switch
        self._threads_before = bool(torch._C._is_multithreading_enabled())
        return True

    def _device_threads(self, on: bool) -> None:
        """Autograd's device threads on (torch's default) or off, for the training thread."""
        if self._threads_switch is not None:
            self._threads_switch(on and self._threads_before)

    def _detail_step(self) -> bool:
        return self._steps_seen % self.module_detail_every == 0

    def _next_step(self) -> None:
        """At a step boundary (training thread): aggregate and send the step that ended (on
        CUDA, the steps whose boundary the GPU has reached), then put the module hooks in for a
        detailed step or take them out for the others."""
        self._steps_seen += 1
        self._model_analysis.step_ended()
        if self._model_analysis.due:
            self._model_analysis.late(self._hooks)
            self._restart_clock()
        if self._cuda:
            self._process_reached()
        else:
            self._process()
        if self.module_detail_every == 1 or self._paused or self._hooks is None:
            return
        if self._detail_step():
            self._hooks.install_forward()
            self._device_threads(False)
        else:
            self._hooks.remove_forward()
            self._device_threads(True)

    def _on_registration(self, module: Any, name: str, submodule: Any) -> None:
        self._names_dirty = True

    # --- aggregation: at step boundaries, or on the idle thread -------------------------------

    def _names(self) -> dict[Any, str]:
        """``id(module)`` → qualname, as the hooks record modules."""
        return {id(m): n for n, m in self.model.named_modules()}

    def _run(self) -> None:
        """Aggregates when no step boundary has for a flush interval (a job that never ends a
        step, a long step). Boundaries do it otherwise, on CUDA too: a second thread wanting the
        GIL costs the training thread more than the work (it launches kernels holding the GIL),
        while inline the work runs as the GPU still drains the steps queued ahead of it."""
        interval = self._flush_interval_s
        while not self._stop.wait(interval):
            if time.monotonic() - self._processed_at >= interval:
                if self._timeline is None:
                    self._process()
                else:
                    self._process_reached(backlog_limit=_CUDA_BACKLOG)
            self._send_text("")  # lines waiting longer than the hand-over's time go now

    def _process_reached(self, backlog_limit: int | None = None) -> None:
        """On CUDA: aggregate a slice of the steps whose boundary event the GPU has reached
        (``query()``, never a wait), spread over the boundaries until the next detailed step's
        (:data:`~acquisition.torch.steps.PROCESS_SLICE`); with ``backlog_limit``, everything
        once more events than that wait."""
        self._processed_at = time.monotonic()
        with self._process_lock:
            boundaries = self._boundaries
            while boundaries and boundaries[0].query():
                boundaries.popleft()
                self._ready += 1
            if self._ready or (self._step_lines is not None and self._step_lines.queued):
                self._process(self._ready)
            elif backlog_limit is not None and len(self._events.events) > backlog_limit:
                self._process()

    def _process(self, steps: int | None = None) -> None:
        """Aggregate the recorded events and send the finished steps' lines (with ``steps``:
        a slice of those of that many step boundaries; the later events wait).

        Never raises into training: a failure is logged (once) and the events are dropped."""
        if self._aggregator is None or self._step_lines is None:
            return
        with self._process_lock:
            self._processed_at = time.monotonic()
            events = self._events.drain() if steps != 0 else []  # 0: only queued lines
            try:
                self._aggregate(events, steps)
            except Exception:
                if not self._process_failed:
                    self._process_failed = True
                    log.exception("nrg: cannot aggregate %d hook events (logged once)", len(events))

    def _aggregate(self, events: list[Any], steps: int | None) -> None:
        assert self._aggregator is not None and self._step_lines is not None
        # After the drain: a module registered before any of its calls in this batch has set
        # the flag by now, so the batch is named with the rebuilt map.
        if self._names_dirty:
            self._names_dirty = False
            self._aggregator.names = self._names()
            if self._backward and self._hooks is not None:
                self._hooks.set_backward(self._leaves())
        spread = None if steps is None else self.module_detail_every
        records = self._aggregator.feed(events, steps, spread) if steps != 0 else []
        self._ready = 0 if steps is None else self._ready - len(records)
        self._step_lines.queue(records)
        self._send_text(self._step_lines.take(spread))

    def _send_text(self, text: str, *, now: bool = False) -> None:
        """Queue lines for the sender thread, in order (:class:`Handover`)."""
        if self._handover is not None:
            self._handover.add(text, now=now)

    def _send(self, points: list[Point]) -> None:
        if not points or self._sender is None:
            return
        try:
            text = self._encoder.encode_many(points)
        except ValueError as exc:  # LineProtocolError; never let it reach training
            log.error("nrg: cannot encode points: %s", exc)
            return
        self._send_text(text, now=True)

    def _run_point(self, event: str, time_ns: int) -> Point:
        fields: dict[str, str | int] = {
            "event": event,
            "pid": self.pid,
            "graph_path": str(self.graph_path) if self.graph_path else "",
        }
        if event == "start":
            fields.update(launching.launch_fields(self.launch, self.gpu_uuid))
        return Point("nrg_run", dict(self.tags), fields, time_ns)
