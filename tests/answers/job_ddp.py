"""A small real DDP training job (gloo, CPU) for the distributed tests, started by torchrun:
EPOCHS × STEPS optimizer steps of at least STEP_WAIT_S each; rank SLOW_RANK sleeps SLOW_S more
after each backward (its all-reduce done), so it ends every step SLOW_S after the others.

Run as ``torchrun --nproc-per-node 2 -m tests.answers.job_ddp SOCKET FALLBACK_DIR GRAPH_DIR``
(``NRG_SOCKET``/``NRG_RUN`` from the agent when it is tracked)."""

from __future__ import annotations

import os
import sys
import time

EPOCHS = 2
STEPS = 4
BATCH = 8
STEP_WAIT_S = 0.05
SLOW_RANK = 1
SLOW_S = 0.15


def main() -> int:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from acquisition.torch import instrument

    sock, fallback, graphs = sys.argv[1:4]
    slow = float(os.environ.get("NRG_TEST_SLOW_S", SLOW_S))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 16), torch.randint(0, 4, (BATCH,))
    with instrument(
        model,
        samples_per_step=BATCH,
        socket_path=sock or None,
        fallback_dir=fallback,
        graph_dir=graphs,
    ) as session:
        for epoch in range(EPOCHS):
            session.epoch(epoch)
            for _ in range(STEPS):
                time.sleep(STEP_WAIT_S)
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                if rank == SLOW_RANK:
                    time.sleep(slow)
                optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
