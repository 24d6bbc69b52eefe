"""A distributed run's ranks as text: the straggler line of the summary and ``report --by
rank``'s table."""

from __future__ import annotations

from acquisition.summary.model import RunSummary

__all__ = ["rank_table", "straggler_lines"]


def straggler_lines(s: RunSummary) -> list[str]:
    """How many ranks on how many hosts, the slowest rank and the energy the others spent
    waiting for it; nothing for a run of one process."""
    st = s.stragglers
    if not st:
        return []
    hosts = len({r["host"] for r in s.per_rank})
    share = st.get("wasted_share")
    percent = "" if share is None else f", {share * 100:.2f} % of the run"
    return [
        f"Ranks: {len(s.per_rank)} on {hosts} host(s); slowest rank {st['slowest_rank']} "
        f"({st['slowest_host'] or '?'}) in {st['slowest_steps']} of {st['steps']} steps",
        f"  waiting for the slowest: {st['wait_s']:.3f} s over all ranks, "
        f"{st['wasted_j']:.3f} J{percent}",
    ]


def rank_table(s: RunSummary) -> str:
    """One row per rank: host, rank, GPU, steps, time, energy, slowest steps and waits."""
    head = (
        f"{'host':<16}{'rank':>6}  {'gpu':<14}{'steps':>7}{'time s':>10}{'energy J':>12}"
        f"{'slowest':>9}{'wait s':>9}{'wait J':>10}"
    )
    lines = [f"run {s.run or '(unnamed)'}", head]
    for r in s.per_rank:
        gpu = r.get("gpu_source") or "-"
        lines.append(
            f"{r['host'][:15]:<16}{r['rank'] or '-':>6}  {gpu:<14}{r['steps']:>7}"
            f"{r['time_s']:>10.3f}{r['energy_j']:>12.3f}{r.get('slowest_steps', 0):>9}"
            f"{r.get('wait_s', 0.0):>9.3f}{r.get('wait_energy_j', 0.0):>10.3f}"
        )
    return "\n".join(lines) + "\n"
