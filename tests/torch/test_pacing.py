"""The pacer of work beside training, and the pieces of the model analysis that call it: a pause
after each slice of work, long enough for the duty cycle; none once released."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from acquisition.torch import complexity
from acquisition.torch.analysis import meta_inputs
from acquisition.torch.pacing import Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_after_each_slice_of_work_none_within_one() -> None:
    clock = Clock()
    pacer = Pacer(slice_s=0.002, duty=0.5, clock=clock)
    clock.now += 0.001
    pacer.tick()  # half a slice: no pause
    assert pacer.pauses == 0
    clock.now += 0.001
    pacer.tick()  # a whole slice worked: a pause, as long as the work (duty 0.5)
    assert pacer.pauses == 1
    pacer.tick()  # a new slice has only begun
    assert pacer.pauses == 1


def test_a_release_ends_the_pauses_and_wakes_a_paused_thread() -> None:
    pacer = Pacer(slice_s=0.0, duty=1e-9)  # any work asks for a pause of days
    paused = threading.Thread(target=pacer.tick)
    paused.start()
    pacer.release()
    paused.join(30)
    assert not paused.is_alive()
    assert pacer.pauses == 1
    pacer.tick()  # released: no pause, however long the work
    assert pacer.pauses == 1 and pacer.released


@pytest.mark.parametrize(("slice_s", "duty"), [(-1.0, 0.5), (0.1, 0.0), (0.1, 1.5)])
def test_bad_settings_are_refused(slice_s: float, duty: float) -> None:
    with pytest.raises(ValueError):
        Pacer(slice_s=slice_s, duty=duty)


def model() -> nn.Module:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    return nn.Sequential(nn.Conv2d(3, 4, 3), block, nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


def test_each_piece_of_the_analysis_ticks_per_module_and_operation() -> None:
    net = model()
    modules = sum(1 for _ in net.modules())
    ticks: list[str] = []

    assert complexity.module_sizes(net, lambda: ticks.append("size")) == complexity.module_sizes(
        net
    )
    assert ticks.count("size") == modules
    copy = complexity.meta_copy(net, lambda: ticks.append("copy"))
    assert ticks.count("copy") == 2 * modules - 1  # tensors of each, then each copied
    x = meta_inputs(torch.randn(2, 3, 8, 8))
    flops = complexity.module_flops_private(copy, (x,), None, lambda: ticks.append("flops"))
    assert flops == complexity.module_flops_private(complexity.meta_copy(net), (x,))
    # One tick per module call, one per operation (at least a convolution in each of two
    # modules, the batch norm, the ReLU and the linear layer's).
    assert ticks.count("flops") >= modules + 5


def test_the_copy_made_piece_by_piece_is_the_model_on_meta() -> None:
    net = model()
    shared = nn.Linear(2, 2)
    net.append(shared)
    net.append(shared)  # one module in two places: one copy in two places
    net.register_forward_hook(lambda m, a, o: None)
    copy = complexity.meta_copy(net, lambda: None)
    assert [n for n, _ in copy.named_modules()] == [n for n, _ in net.named_modules()]
    assert copy[4] is copy[5] and copy[4] is not shared
    assert all(p.device.type == "meta" for p in copy.parameters())
    assert [p.shape for p in copy.parameters()] == [p.shape for p in net.parameters()]
    assert [b.shape for b in copy.buffers()] == [b.shape for b in net.buffers()]
    assert not copy._forward_hooks and net._forward_hooks
