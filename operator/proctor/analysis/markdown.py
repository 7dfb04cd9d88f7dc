"""sensitivity_report.md: the analysis for people (pure: figures in, text out)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from proctor.analysis.load import AgentRun
from proctor.analysis.reliability import AgentFigures, Comparison

MEANINGS = [
    ("S_prompt", "1 - mean over tasks of the population variance of the variant scores "
     "(the seed's formula). 1 = the wording never changes the score. With 0/1 scores a "
     "task's variance is at most 0.25, so S_prompt cannot fall below 0.75."),
    ("S_prompt_seed", "The seed harness's reading with repeats: the variance across "
     "variants per repeat, then averaged; mixes sampling noise into sensitivity."),
    ("R_prompt", "Pooled accuracy on variants / pooled accuracy on originals, clamped at 1 "
     "as HAL does (unclamped beside it); 0 to 1, NaN when the original accuracy is 0."),
    ("accuracy gap", "Mean over tasks of original score minus mean variant score; -1 to 1, "
     "positive when rewording hurts."),
    ("sigma2_run", "Within-prompt variance: mean over (task, variant) of the sample variance "
     "over repeats; 0 to 0.5 for 0/1 scores. Needs 2+ repeats."),
    ("sigma2_prompt", "Between-prompt variance with the sampling noise taken out: "
     "max(0, sample variance of the variant means - sigma2_run / K), averaged over tasks."),
    ("C_out", "Outcome consistency: mean over tasks of (2p - 1)^2, p the resolved share of "
     "the original prompt's repeats; 0 (coin flip) to 1 (always the same). Needs 2+ repeats."),
    ("pass@k / pass^k", "Chance that at least one / all of k repeats resolve, from n "
     "non-error repeats with c resolved; tasks with n < k are left out and counted."),
    ("C_res", "exp(-coefficient of variation) of latency, tokens, cost across repeats; "
     "0 to 1, 1 = identical every time."),
]


def _num(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def _ci(f: AgentFigures, name: str) -> str:
    lo, hi = f.intervals.get(name, (math.nan, math.nan))
    if name == "R_prompt":
        lo, hi = min(1.0, lo), min(1.0, hi)
    return "" if not (math.isfinite(lo) and math.isfinite(hi)) else f" [{lo:.3f}, {hi:.3f}]"


def summary_table(figs: Sequence[AgentFigures]) -> list[str]:
    lines = ["| Agent | Tasks | Resolved (errors out) | S_prompt | R_prompt | Gap | C_out | "
             "σ²_prompt | σ²_run | Errors left out |", "|" + "---|" * 10]
    for f in figs:
        lines.append(
            f"| {f.agent} | {f.num_tasks}/{f.tasks} | {_num(f.resolved_rate_excl_errors)}"
            f"{_ci(f, 'resolved_rate_excl_errors')} | {_num(f.S_prompt)}{_ci(f, 'S_prompt')} | "
            f"{_num(f.R_prompt)}{_ci(f, 'R_prompt')} | {_num(f.accuracy_gap)}"
            f"{_ci(f, 'accuracy_gap')} | {_num(f.C_out)}{_ci(f, 'C_out')} | "
            f"{_num(f.sigma2_prompt)}{_ci(f, 'sigma2_prompt')} | "
            f"{_num(f.sigma2_run)}{_ci(f, 'sigma2_run')} | {f.error_items} |")
    return lines


def _most_sensitive(runs: Sequence[AgentRun], task_rows: Sequence[Sequence[object]],
                    top: int) -> list[str]:
    ranked = [r for r in sorted(task_rows, key=lambda r: (-float(r[1]), str(r[5]), str(r[0])))
              if float(r[1]) > 0][:top]
    if not ranked:
        return ["No task's score changed with the wording."]
    by_agent = {r.agent: r for r in runs}
    lines = []
    for row in ranked:
        run = by_agent[str(row[5])]
        lines += [f"### {row[0]} ({row[5]}): variance {float(row[1]):.3f}", "",
                  "| Variant | Outcomes over repeats |", "|---|---|"]
        for variant in run.variants:
            outs = [run.outcomes.get((str(row[0]), variant, k), "-")
                    for k in range(run.scores.shape[2])]
            lines.append(f"| {variant} | {', '.join(outs)} |")
        lines.append("")
    return lines


def render(runs: Sequence[AgentRun], figs: Sequence[AgentFigures],
           task_rows: Sequence[Sequence[object]], comparisons: Sequence[Comparison],
           images: Sequence[tuple[str, str]], top: int = 10) -> str:
    """The report; `images` are (title, relative path) pairs."""
    ranking = sorted(figs, key=lambda f: (-(f.S_prompt if math.isfinite(f.S_prompt) else -1),
                                          f.agent))
    lines = ["# Prompt sensitivity and reliability", "",
             "Items in error are left out of every figure here (and counted), so the resolved "
             "rate below is not summary.json's, which counts errors as failures. Intervals are "
             "95% percentile bootstrap intervals over tasks.", "", "## Summary", "",
             *summary_table(figs), ""]
    for f in figs:
        for note in f.notes:
            lines.append(f"* {f.agent}: {note}")
        left = ", ".join(f"{k} {v}" for k, v in f.tasks_left_out.items() if v)
        if left:
            lines.append(f"* {f.agent}: tasks left out for too few scores: {left}")
    lines += ["", "## Ranking by robustness (S_prompt)", ""]
    lines += [f"{i}. {f.agent}: {_num(f.S_prompt)}" for i, f in enumerate(ranking, 1)]
    if comparisons:
        lines += ["", "## Paired comparisons", "",
                  "| A | B | Tasks | Only A | Only B | McNemar p | Rate A - B | Bootstrap p |",
                  "|" + "---|" * 8]
        lines += [f"| {c.agent_a} | {c.agent_b} | {c.tasks} | {c.only_a} | {c.only_b} | "
                  f"{c.mcnemar_p:.4f} | {_num(c.rate_difference)} [{_num(c.interval[0])}, "
                  f"{_num(c.interval[1])}] | {_num(c.bootstrap_p)} |" for c in comparisons]
        if any(c.majority for c in comparisons):
            lines += ["", "With repeats, McNemar compares each task's majority outcome over "
                          "the original prompt's repeats (a tie counts as unresolved)."]
    lines += ["", "## Most sensitive tasks", "", *_most_sensitive(runs, task_rows, top)]
    lines += ["## Plots", ""] + [f"![{title}]({path})" for title, path in images]
    lines += ["", "## What each figure means", ""]
    lines += [f"* **{name}**: {text}" for name, text in MEANINGS]
    return "\n".join(lines) + "\n"
