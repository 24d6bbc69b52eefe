"""A real instrumented CPU training job of known epoch lengths, for the forecast tests: EPOCHS
epochs of STEPS optimizer steps, each step waiting a time drawn uniformly from
[WAIT_S − JITTER_S, WAIT_S + JITTER_S] (seeded), and an evaluation of EVAL_S in ``paused()``
after each epoch. With ``--plan`` the job declares its length (``instrument(epochs=...)``).

Run as ``python -m tests.forecast.job_epochs SOCKET FALLBACK_DIR GRAPH_DIR EPOCHS STEPS WAIT_S
JITTER_S [--plan]``."""

from __future__ import annotations

import random
import sys
import time

EVAL_S = 0.15
SEED = 27


def main() -> int:
    import torch
    from torch import nn

    from acquisition.torch import instrument

    sock, fallback, graphs, epochs, steps, wait, jitter = sys.argv[1:8]
    n_epochs, n_steps, wait_s, jitter_s = int(epochs), int(steps), float(wait), float(jitter)
    plan = {"epochs": n_epochs, "steps_per_epoch": n_steps} if "--plan" in sys.argv else {}
    rng = random.Random(SEED)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randint(0, 2, (8,))
    with instrument(
        model,
        example_inputs=(x,),
        socket_path=sock,
        fallback_dir=fallback,
        graph_dir=graphs,
        **plan,  # type: ignore[arg-type]
    ) as session:
        for epoch in range(n_epochs):
            session.epoch(epoch)
            for _ in range(n_steps):
                time.sleep(wait_s + rng.uniform(-jitter_s, jitter_s))
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            with session.paused():
                time.sleep(EVAL_S)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
