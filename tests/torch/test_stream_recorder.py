"""The CUDA hooks' event record at the ``torch._C`` seam: torch's event base class, the raw
current-stream id and the current stream replaced by stand-ins that log what is asked of them."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from acquisition.torch.hooks import stream_recorder


class FakeStream:
    def __init__(self, raw: int) -> None:
        self.cuda_stream = raw


class FakeEventBase:
    recorded: ClassVar[list[tuple[Any, int]]] = []

    def record(self, stream: FakeStream) -> None:
        FakeEventBase.recorded.append((self, stream.cuda_stream))


class FakeEvent(FakeEventBase):
    pass


def test_events_go_on_the_current_stream_looked_up_only_when_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    current = {"raw": 7}
    lookups: list[int] = []

    def current_stream() -> FakeStream:
        lookups.append(current["raw"])
        return FakeStream(current["raw"])

    FakeEventBase.recorded = []
    monkeypatch.setattr(torch._C, "_CudaEventBase", FakeEventBase, raising=False)
    monkeypatch.setattr(
        torch._C, "_cuda_getCurrentRawStream", lambda device: current["raw"], raising=False
    )
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    record = stream_recorder(FakeEvent)
    events = [FakeEvent() for _ in range(5)]
    record(events[0])
    record(events[1])
    current["raw"] = 9  # ``with torch.cuda.stream(side):``
    record(events[2])
    current["raw"] = 7
    record(events[3])
    record(events[4])
    assert FakeEventBase.recorded == [
        (events[0], 7),
        (events[1], 7),
        (events[2], 9),
        (events[3], 7),
        (events[4], 7),
    ]
    assert lookups == [7, 9, 7]  # the stream object is built again only after a change


def test_an_event_class_of_its_own_records_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch._C, "_CudaEventBase", FakeEventBase, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1, raising=False)

    class StandIn:
        records = 0

        def record(self, stream: Any = None) -> None:
            assert stream is None  # its own default: the current stream
            StandIn.records += 1

    record = stream_recorder(StandIn)
    record(StandIn())
    assert StandIn.records == 1
