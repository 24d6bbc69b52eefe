"""A small real training job for the tracked-run tests: instrumented with acquisition.torch,
EPOCHS × STEPS optimizer steps of at least STEP_WAIT_S each, an evaluation in ``paused()``
between epochs, then exit code 3 (so the test can see the job's own code come back).

Run as ``python -m tests.answers.job_train SOCKET FALLBACK_DIR GRAPH_DIR``."""

from __future__ import annotations

import sys
import time

EPOCHS = 2
STEPS = 3
STEP_WAIT_S = 0.12
EVAL_S = 0.3
EXIT_CODE = 3


def main() -> int:
    import torch
    from torch import nn

    from acquisition.torch import instrument

    sock, fallback, graphs = sys.argv[1:4]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    with instrument(
        model, example_inputs=(x,), socket_path=sock, fallback_dir=fallback, graph_dir=graphs
    ) as session:
        for epoch in range(EPOCHS):
            session.epoch(epoch)
            for _ in range(STEPS):
                time.sleep(STEP_WAIT_S)
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            with session.paused():
                time.sleep(EVAL_S)
    return EXIT_CODE


if __name__ == "__main__":
    raise SystemExit(main())
