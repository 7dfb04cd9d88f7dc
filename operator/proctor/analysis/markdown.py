"""sensitivity_report.md: the analysis for people (pure: figures in, text out)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from proctor.analysis.calibration import BINS, MIN_CLASS, MIN_ITEMS
from proctor.analysis.compare import PairComparison, holm, table
from proctor.analysis.figures import PER_K, capped, summary_columns
from proctor.analysis.inference import MIN_TASKS
from proctor.analysis.load import AgentRun
from proctor.analysis.reliability import AgentFigures
from proctor.variants.similarity import spread

NO_VARIANTS = "no variants: prompt sensitivity not measured"
NO_CONFIDENCE = ("No agent reported a confidence (A2A metadata key `confidence`, 0 to 1): "
                 "calibration not measured.")

MEANINGS = [
    ("S_prompt per run (headline)", "HAL's per-run reading: each repeat is one run over the "
     "variants; per run, 1 - the mean over tasks of the population variance of that run's "
     "scores across variants; then the mean over runs. Its expectation does not depend on "
     "the number of repeats K, so agents run with different K compare. With 0/1 scores it "
     "cannot fall below 0.75."),
    ("S_prompt on K-repeat means (K-dependent)", "HAL's formula 1 - mean variance applied "
     "to each variant's mean over its K repeats (exactly HAL's figure when K = 1). A mean "
     "of K repeats has variance about sigma2_prompt + sigma2_run / K, so this reading rises "
     "with K: compare it only between runs with the same K."),
    ("R_prompt", "Pooled accuracy on variants / pooled accuracy on originals, clamped at 1 "
     "as HAL does (unclamped beside it in the CSVs); NaN when the original accuracy is 0."),
    ("accuracy gap", "Mean over tasks of original score minus mean variant score; -1 to 1, "
     "positive when rewording hurts."),
    ("sigma2_run", "Within-prompt variance: mean over (task, variant) of the sample variance "
     "over repeats; 0 to 0.5 for 0/1 scores. Needs 2+ repeats."),
    ("sigma2_prompt", "Between-prompt variance with the sampling noise taken out: per task "
     "the sample variance of the variant means minus sigma2_run / K, averaged over tasks. "
     "Estimator: unclipped method of moments (no per-task clipping at 0, which would bias it "
     "upward), so it is unbiased and can be slightly negative when prompts do not matter. "
     "K-independent; a Proctor figure, not HAL's."),
    ("C_out", "Outcome consistency (HAL): mean over tasks of (2p - 1)^2, p the resolved share "
     "of the original prompt's repeats; 0 (coin flip) to 1 (always the same)."),
    ("pass@k / pass^k", "Chance that at least one / all of k repeats resolve, by the unbiased "
     "estimators 1 - C(n-c, k)/C(n, k) and C(c, k)/C(n, k) from n non-error repeats with c "
     "resolved, averaged over tasks; tasks with n < k are left out and counted."),
    ("C_res", "Resource consistency (HAL): mean over (task, variant) of exp(-coefficient of "
     "variation) of latency, tokens or cost across repeats; 1 = identical every time."),
    ("Abstention rate / selective accuracy", "An answer without a patch is an abstention "
     "(HAL's abstention metrics): the share of scored items (every variant and repeat) "
     "answered without one, and the resolved share of the items answered with one."),
    ("ece", f"Expected calibration error of the agent's reported confidence (HAL's): "
     f"{BINS} equal-width bins on [0, 1], the sum over bins of (items in it / items) x "
     "|resolved share - mean confidence|, over every scored item with a confidence. 0 is "
     "perfect, but ECE is biased upward on few items: read it against *ECE if calibrated*, "
     "the ECE a perfectly calibrated agent with the same confidences shows from sampling "
     "noise alone (mean of 200 seeded simulations)."),
    ("Brier", "Mean of (confidence - resolved)^2 (HAL reports 1 - Brier); 0 is perfect, "
     "answering the base rate p every time scores p(1 - p)."),
    ("AUROC", "Chance that a resolved item's confidence is above an unresolved one's, ties "
     "half (HAL's predictability_roc_auc); 0.5 is chance, 1 perfect ordering."),
]

APPENDIX = [
    ("Intervals of single-agent figures", "95% percentile bootstrap, resampling tasks with "
     "replacement (a task's variants and repeats travel together: they are one cluster), "
     "2,000 resamples with a fixed seed (--seed, --resamples). Each figure is recomputed on "
     "every resample exactly as on the data: pooled ratios (resolved rate, accuracies, "
     "R_prompt, gap, C_out, sigma2s, S_prompt) as ratios of resampled sums; S_prompt per "
     "run per resample and run; pass@k, pass^k and C_res as means over the resampled "
     "tasks' own values. Simulated coverage at 200 tasks: 92-98% (tests)."),
    ("Too few tasks", "A percentile bootstrap of a mean over n tasks is too narrow when n "
     "is small (it uses the plug-in spread and a normal quantile): measured, a nominal 95% "
     "interval covers about 83% at 5 tasks, 91% at 10 and 94% from 30. A figure resting on "
     "fewer than 30 tasks is flagged (⚠ and a note); read its interval as a lower bound on "
     "the uncertainty."),
    ("Paired test between agents", "Two-sided sign-flip (paired permutation) test on the "
     "per-task differences of per-task means, each over the (variant, repeat) cells both "
     "agents scored. Exact (every one of 2^m sign flips) up to m = 16 non-zero differences, "
     "else 20,000 seeded random flips with p = (1 + b) / (1 + 20,000), which is valid at "
     "any number of flips. Tasks are the unit, so the correlation of items within a task is "
     "respected. No p-value comes from a bootstrap. Simulated false-positive rate at alpha "
     "0.05 on clustered data without a true difference: at most 0.06 (tests)."),
    ("Calibration and abstention", "The same task bootstrap (a task's items travel "
     "together). ECE's interval is that of a biased estimate: it says how much ECE moves "
     "with the tasks drawn, not where the true miscalibration lies; compare with ECE if "
     f"calibrated. Flagged under {MIN_ITEMS} items with a confidence (ECE noise alone is "
     f"about 0.1 there) or, for AUROC, under {MIN_CLASS} resolved or unresolved items. "
     "AUROC's interval counts confidences on a 0.001 grid (its point value is exact)."),
    ("Interval of a difference", "95% percentile bootstrap of the mean per-task difference, "
     "resampling tasks (clusters)."),
    ("Multiple pairs", "Holm's step-down adjustment over every pair in the table "
     "(comparisons.csv p_holm)."),
    ("McNemar", "Exact binomial McNemar test, reported only where each task has exactly one "
     "0/1 outcome per agent (one variant, one repeat); otherwise it would discard the "
     "repeats and variants, and the sign-flip test is the one to read."),
    ("Detectable effect and tasks needed", "Normal approximation: detectable = (z(0.975) + "
     "z(0.8)) x sd(d_t) / sqrt(tasks); tasks needed = (z(0.975) + z(0.8))^2 x Var(d_t) / d^2 "
     "with Var(d_t) = sigma2_task + sigma2_prompt / V + sigma2_run / (V K) from the runs' "
     "variance components (`proctor compare`)."),
]


def _num(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def _ci(f: AgentFigures, name: str) -> str:
    lo, hi = f.intervals.get(name, (math.nan, math.nan))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    lo, hi = capped(name, (lo, hi))
    flag = " ⚠" if 0 < f.denominators.get(name, MIN_TASKS) < MIN_TASKS else ""
    return f" [{lo:.3f}, {hi:.3f}]{flag}"


def summary_table(figs: Sequence[AgentFigures]) -> list[str]:
    """The headline table (the figures declared in it); the sensitivity columns only where
    some agent has variants."""
    cols = summary_columns(any(f.variants > 1 for f in figs))
    head = ["Agent", "Tasks", *(c.label for c in cols), "Errors left out"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in figs:
        cells = [f.agent, str(f.tasks), *(f"{_num(c.value(f))}{_ci(f, c.interval)}"
                                          for c in cols), str(f.error_items)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def repeat_table(figs: Sequence[AgentFigures]) -> list[str]:
    """pass@k and pass^k for every k, and C_res, with intervals (agents with repeats)."""
    lines = []
    for f in figs:
        if not f.pass_at_k:
            continue
        lines += [f"**{f.agent}** (original prompts, {f.repeats} repeats)", "",
                  "| k | " + " | ".join(c.label for c in PER_K) + " |",
                  "|---|" + "---|" * len(PER_K)]
        lines += ["| " + " | ".join([str(k), *(
            f"{getattr(f, c.attr)[k]:.3f}{_ci(f, c.interval.format(k=k))}" for c in PER_K)])
            + " |" for k in sorted(f.pass_at_k)]
        if f.C_res:
            lines += ["", "C_res: " + ", ".join(f"{k} {v:.3f}{_ci(f, f'C_res_{k}')}"
                                                for k, v in f.C_res.items())]
        lines.append("")
    return lines


def _ci_of(f: AgentFigures, name: str, value: float) -> str:
    return f"{_num(value)}{_ci(f, name)}"


def predictability_table(figs: Sequence[AgentFigures]) -> list[str]:
    """Abstention for every agent; calibration where the agent reported a confidence."""
    cal = any(f.calibration for f in figs)
    head = ["Agent", "Abstention rate", "Selective accuracy"]
    if cal:
        head += ["Items with a confidence", "Mean confidence", "ECE", "ECE if calibrated",
                 "Brier", "AUROC"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in figs:
        cells = [f.agent, _ci_of(f, "abstention_rate", f.abstention_rate),
                 _ci_of(f, "selective_accuracy", f.selective_accuracy)]
        c = f.calibration
        if c:
            cells += [str(c.items), _num(c.mean_confidence), _ci_of(f, "ece", c.ece),
                      _num(c.ece_if_calibrated), _ci_of(f, "brier", c.brier),
                      _ci_of(f, "auroc", c.auroc)]
        elif cal:
            cells += ["0 (none reported)", *["n/a"] * 5]
        lines.append("| " + " | ".join(cells) + " |")
    return lines if cal else [*lines, "", NO_CONFIDENCE]


def similarity_table(runs: Sequence[AgentRun]) -> list[str]:
    """Per variant id, how far its texts are from the originals (each text once, however
    many agents ran it)."""
    texts = {(task, variant, run.hashes.get((task, variant), "")): value
             for run in runs for (task, variant), value in run.similarity.items()}
    by: dict[str, list[float]] = {}  # in variants.jsonl's order: the order styles are taken
    for run in runs:
        for _, variant in run.hashes:
            by.setdefault(variant, [])
    for (_, variant, _), value in texts.items():
        by.setdefault(variant, []).append(value)
    by = {v: values for v, values in by.items() if values}
    if not by:
        return ["No variant texts were recorded (variants.jsonl): similarity not measured.",
                ""]
    rows = [(v, *spread(values)) for v, values in by.items()]
    rows.append(("all variants", *spread(x for values in by.values() for x in values)))
    lines = ["Similarity of each variant's text to the original: the token-level difflib "
             "ratio, 1 = the same words in the same order (a moved or reworded part lowers "
             "it). Low values show the variants really differ; an S_prompt near 1 over "
             "variants near 1 says little.", "",
             "| Variant | Texts | Median | Lowest | Highest |", "|---|---|---|---|---|"]
    lines += [f"| {v} | {n} | {med:.3f} | {lo:.3f} | {hi:.3f} |" for v, n, med, lo, hi in rows]
    return [*lines, ""]


def _most_sensitive(runs: Sequence[AgentRun], task_rows: Sequence[Sequence[Any]],
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


def _notes(figs: Sequence[AgentFigures]) -> list[str]:
    lines = []
    for f in figs:
        lines += [f"* {f.agent}: {note}" for note in f.notes]
        left = ", ".join(f"{k} {v}" for k, v in f.tasks_left_out.items() if v)
        if left:
            lines.append(f"* {f.agent}: tasks left out for too few scores: {left}")
    return lines


def _ranking(figs: Sequence[AgentFigures]) -> list[str]:
    ranked = sorted((f for f in figs if math.isfinite(f.S_prompt_per_run)),
                    key=lambda f: (-f.S_prompt_per_run, f.agent))
    lines = ["## Ranking by robustness (S_prompt per run)", ""]
    lines += [f"{i}. {f.agent}: {_num(f.S_prompt_per_run)}{_ci(f, 'S_prompt_per_run')}"
              for i, f in enumerate(ranked, 1)]
    unranked = [f.agent for f in figs if not math.isfinite(f.S_prompt_per_run)]
    if unranked:
        lines.append(f"\nNot ranked ({NO_VARIANTS}): {', '.join(unranked)}")
    return [*lines, ""]


def render(runs: Sequence[AgentRun], figs: Sequence[AgentFigures],
           task_rows: Sequence[Sequence[Any]], comparisons: Sequence[PairComparison],
           images: Sequence[tuple[str, str, str]], top: int = 10) -> str:
    """The report; `images` are (title, relative path, caption) triples."""
    sens = any(f.variants > 1 for f in figs)
    lines = ["# Prompt sensitivity and reliability", "",
             "Items in error are left out of every figure here (and counted), so the resolved "
             "rate below is not summary.json's, which counts errors as failures. Brackets: "
             f"95% bootstrap intervals over tasks; ⚠: fewer than {MIN_TASKS} tasks, the "
             "interval is too narrow (see the appendix).", "", "## Summary", "",
             *summary_table(figs), "", *_notes(figs), ""]
    lines += (_ranking(figs) if sens else [f"**{NO_VARIANTS}.**", ""])
    if any(f.pass_at_k for f in figs):
        lines += ["## pass@k, pass^k and C_res", "", *repeat_table(figs)]
    lines += ["## Predictability: calibration and abstention", "",
              *predictability_table(figs), ""]
    if comparisons:
        adjusted = holm([c.p_value if math.isfinite(c.p_value) else 1.0 for c in comparisons])
        lines += ["## Paired comparisons", "", *table(comparisons, adjusted), ""]
    if sens:
        lines += ["## How far the variants are from the original", "",
                  *similarity_table(runs)]
        lines += ["## Most sensitive tasks", "", *_most_sensitive(runs, task_rows, top)]
    lines += ["## Figures", ""]
    for n, (title, path, caption) in enumerate(images, 1):
        lines += [f"![{title}]({path})", "", f"*Figure {n}. {caption}*", ""]
    lines += ["## What each figure means", ""]
    lines += [f"* **{name}**: {text}" for name, text in MEANINGS]
    lines += ["", "## Appendix: every interval and test", ""]
    lines += [f"* **{name}**: {text}" for name, text in APPENDIX]
    return "\n".join(lines) + "\n"
