"""Reliability figures: prompt sensitivity, consistency over repeats, intervals (pure).

Input: one agent's scores as an array `scores[task, variant, repeat]` (variant 0 is the
original prompt; NaN where an item is in error or was not run). A score is 1 if the
item resolved, else 0, or the fraction of its FAIL_TO_PASS tests that passed. Items in
error are left out of every figure here and counted; these figures are therefore named
apart from summary.json's resolved rate, which counts errors as failures.

Per task, over its scored variants (the original included; a variant's score is the
mean over its non-error repeats): variance (population), mean_score, min_max_gap,
S_task = 1 - variance. Per agent:

* S_prompt = 1 - mean variance: HAL's formula (base_benchmark's prompt-sensitivity
  metrics), exactly, on the variant means. With K repeats a variant mean's variance is
  about sigma2_prompt + sigma2_run / K, so this reading rises with K: it is kept, and
  labelled K-dependent, not made the headline.
* S_prompt_per_run: HAL's per-run reading (each repeat is one HAL run over the variants:
  1 - mean over tasks of the variance across variants of that run's scores, then the mean
  over runs). Its expectation does not depend on K: the report's headline.
* R_prompt (pooled accuracy on variants over pooled accuracy on originals, as HAL
  computes it), the paired original-minus-variants gap, and with repeats >= 2 the
  variance components (sigma2_prompt without per-task clipping: unbiased, may be
  negative), C_out, pass@k, pass^k and C_res.
* Predictability (`calibration`): abstention rate and selective accuracy for every agent;
  ECE, Brier and AUROC of the confidence an agent reports, when it reports one.

Every interval is a seeded percentile bootstrap over tasks (clusters: a task's variants and
repeats travel together). Most bootstrapped figures are ratios of sums of per-task
contributions (`_CONTRIB`), so one resample is one weighted sum and thousands of resamples
are one matrix product; the others (per run, pass@k, pass^k, C_res) reuse the same draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from proctor.analysis.calibration import Answers, Calibration, abstention_parts, calibration
from proctor.analysis.inference import MIN_TASKS, percentile_interval, resample_weights

INTERVAL_LEVEL = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20261124

# Per-task contributions; each bootstrapped figure is sum(numerator) / sum(denominator).
_CONTRIB = ("orig_sum", "orig_n", "var_sum", "var_n", "variance", "sens_valid",
            "cout", "cout_valid", "gap", "gap_valid", "task_rate", "rate_valid",
            "sigma2_run", "run_valid", "sigma2_prompt", "prompt_valid")
_C = {name: i for i, name in enumerate(_CONTRIB)}


@dataclass(frozen=True)
class TaskFigures:
    """One task's sensitivity, in the seed's columns first."""

    task_id: str
    variance: float
    mean_score: float
    min_max_gap: float
    S_task: float
    num_variants: int
    """Variants with at least one non-error repeat (the original included)."""
    original_score: float
    """Mean score of the original prompt's non-error repeats (NaN if none)."""
    sigma2_run: float
    sigma2_prompt: float


@dataclass
class AgentFigures:
    """One agent's reliability figures; NaN where a figure is undefined (see `notes`)."""

    agent: str
    S_prompt: float = math.nan
    mean_variance: float = math.nan
    std_variance: float = math.nan
    mean_min_max_gap: float = math.nan
    max_min_max_gap: float = math.nan
    num_tasks: int = 0
    S_prompt_per_run: float = math.nan
    """HAL's per-run reading: does not move with the number of repeats (the headline)."""
    resolved_rate_excl_errors: float = math.nan
    """Mean over tasks of the original prompt's non-error score (errors left out)."""
    accuracy_original: float = math.nan
    accuracy_variants: float = math.nan
    R_prompt: float = math.nan
    R_prompt_unclamped: float = math.nan
    accuracy_gap: float = math.nan
    """Mean over tasks of original score minus mean variant score (positive: worse)."""
    sigma2_prompt: float = math.nan
    sigma2_run: float = math.nan
    C_out: float = math.nan
    pass_at_k: dict[int, float] = field(default_factory=dict)
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    C_res: dict[str, float] = field(default_factory=dict)
    abstention_rate: float = math.nan
    """Share of scored items answered without a patch (all variants and repeats)."""
    selective_accuracy: float = math.nan
    """Resolved share of the scored items answered with a patch."""
    calibration: Calibration | None = None
    """ECE, Brier, AUROC of the agent's reported confidence; None when it reported none."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95% interval of each figure by name (pass@k as "pass@2", C_res as "C_res_latency")."""
    denominators: dict[str, int] = field(default_factory=dict)
    """Tasks each interval rests on, by figure name."""
    tasks: int = 0
    variants: int = 0
    repeats: int = 0
    items: int = 0
    error_items: int = 0
    tasks_left_out: dict[str, int] = field(default_factory=dict)
    """Tasks left out of a figure, by figure, because they had too few scores."""
    notes: list[str] = field(default_factory=list)


def _nan_stat(fn, a: np.ndarray, valid: np.ndarray, **kw) -> np.ndarray:
    """fn over the axis after `valid`'s, where `valid`, NaN elsewhere (no empty slices)."""
    out = np.full(valid.shape, np.nan)
    if valid.any():
        out[valid] = fn(a[valid], axis=1, **kw)
    return out


def task_figures(scores: np.ndarray) -> dict[str, np.ndarray]:
    """Per-task arrays (length = tasks) of every per-task quantity."""
    n_tv = np.sum(~np.isnan(scores), axis=2)                    # (T, V) repeats scored
    m_tv = _nan_stat(np.nanmean, scores, n_tv > 0)           # variant means
    sv = np.sum(n_tv > 0, axis=1)                               # scored variants
    sens = sv >= 2
    out = {"n_tv": n_tv, "m_tv": m_tv, "scored_variants": sv, "sens_valid": sens,
           "variance": _nan_stat(np.nanvar, m_tv, sens),
           "mean_score": _nan_stat(np.nanmean, m_tv, sv > 0),
           "min_max_gap": _nan_stat(np.nanmax, m_tv, sv > 0)
           - _nan_stat(np.nanmin, m_tv, sv > 0)}
    orig = scores[:, 0, :]
    out["orig_n"] = np.sum(~np.isnan(orig), axis=1)
    out["orig_sum"] = np.nansum(orig, axis=1)
    rest = scores[:, 1:, :]
    out["var_n"] = np.sum(~np.isnan(rest), axis=(1, 2))
    out["var_sum"] = np.nansum(rest, axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        out["original_score"] = np.where(out["orig_n"] > 0, out["orig_sum"] / out["orig_n"],
                                         np.nan)
    out["cout_valid"] = out["orig_n"] >= 2
    out["cout"] = np.where(out["cout_valid"], (2 * out["original_score"] - 1) ** 2, np.nan)
    var_mean = _nan_stat(np.nanmean, m_tv[:, 1:], np.sum(n_tv[:, 1:] > 0, axis=1) > 0) \
        if m_tv.shape[1] > 1 else np.full(len(m_tv), np.nan)
    out["gap"] = out["original_score"] - var_mean
    out["gap_valid"] = ~np.isnan(out["gap"])
    out.update(_components(scores, n_tv, m_tv, sens))
    return out


def _components(scores: np.ndarray, n_tv: np.ndarray, m_tv: np.ndarray,
                sens: np.ndarray) -> dict[str, np.ndarray]:
    """sigma2_run (within a prompt, over repeats) and sigma2_prompt (between prompts):
    per task, the sample variance of the variant means less sigma2_run / K. Not clipped at 0
    per task (clipping biases the mean upward); the mean over tasks is unbiased and may be
    slightly negative when prompts do not matter."""
    run_ok = n_tv >= 2
    s2_tv = np.full(n_tv.shape, np.nan)
    if run_ok.any():
        s2_tv[run_ok] = np.nanvar(scores[run_ok], axis=1, ddof=1)
    has_run = np.asarray(run_ok.any(axis=1))  # an array, as numpy's types cannot tell
    s2_run = _nan_stat(np.nanmean, s2_tv, has_run)
    with np.errstate(invalid="ignore", divide="ignore"):
        k_t = n_tv.sum(axis=1) / (n_tv > 0).sum(axis=1)  # repeats per scored variant
    between = _nan_stat(np.nanvar, m_tv, sens, ddof=1)
    ok = sens & has_run
    s2_prompt = np.where(ok, between - s2_run / k_t, np.nan)
    return {"sigma2_run": s2_run, "sigma2_prompt": s2_prompt}


def contributions(per_task: dict[str, np.ndarray]) -> np.ndarray:
    """The (tasks x _CONTRIB) matrix the bootstrap resamples."""
    def filled(name: str, valid: str) -> np.ndarray:
        return np.where(per_task[valid], per_task[name], 0.0)

    cols = {"orig_sum": per_task["orig_sum"], "orig_n": per_task["orig_n"],
            "var_sum": per_task["var_sum"], "var_n": per_task["var_n"],
            "variance": filled("variance", "sens_valid"), "sens_valid": per_task["sens_valid"],
            "cout": filled("cout", "cout_valid"), "cout_valid": per_task["cout_valid"],
            "gap": filled("gap", "gap_valid"), "gap_valid": per_task["gap_valid"],
            "task_rate": np.where(per_task["orig_n"] > 0, per_task["original_score"], 0.0),
            "rate_valid": per_task["orig_n"] > 0}
    for name, valid in (("sigma2_run", "run_valid"), ("sigma2_prompt", "prompt_valid")):
        ok = np.isfinite(per_task[name])
        cols[name], cols[valid] = np.where(ok, per_task[name], 0.0), ok
    return np.column_stack([np.asarray(cols[n], dtype=float) for n in _CONTRIB])


def figures_from_sums(s: np.ndarray) -> dict[str, np.ndarray]:
    """The bootstrapped figures from column sums (any leading shape); NaN when 0/0."""
    def ratio(num: str, den: str) -> np.ndarray:
        n, d = s[..., _C[num]], s[..., _C[den]]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(d > 0, n / np.where(d > 0, d, 1), np.nan)

    acc_o, acc_v = ratio("orig_sum", "orig_n"), ratio("var_sum", "var_n")
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(acc_o > 0, acc_v / np.where(acc_o > 0, acc_o, 1), np.nan)
    return {"resolved_rate_excl_errors": ratio("task_rate", "rate_valid"),
            "accuracy_original": acc_o, "accuracy_variants": acc_v,
            "S_prompt": 1 - ratio("variance", "sens_valid"), "R_prompt": r,
            "C_out": ratio("cout", "cout_valid"), "accuracy_gap": ratio("gap", "gap_valid"),
            "sigma2_run": ratio("sigma2_run", "run_valid"),
            "sigma2_prompt": ratio("sigma2_prompt", "prompt_valid")}


def bootstrap_intervals(contrib: np.ndarray, seed: int = DEFAULT_SEED,
                        resamples: int = DEFAULT_RESAMPLES,
                        level: float = INTERVAL_LEVEL) -> dict[str, tuple[float, float]]:
    """Percentile intervals of each figure, resampling tasks with replacement."""
    return _intervals(resample_weights(seed, len(contrib), resamples), contrib, level)


def _intervals(weights: np.ndarray, contrib: np.ndarray,
               level: float = INTERVAL_LEVEL) -> dict[str, tuple[float, float]]:
    if not len(contrib):
        return {name: (math.nan, math.nan) for name in figures_from_sums(contrib.sum(0))}
    boot = figures_from_sums(weights @ contrib)
    return {name: percentile_interval(values, level) for name, values in boot.items()}


def _ratio_intervals(weights: np.ndarray, parts: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict[str, tuple[float, float]]:
    """Interval of sum(num) / sum(den) for each named (num, den) pair of per-task arrays,
    all over the same resampled tasks in one matrix product."""
    if not parts or not weights.shape[1]:
        return dict.fromkeys(parts, (math.nan, math.nan))
    cols = np.column_stack([x for num, den in parts.values() for x in (num, den)])
    sums = weights @ cols
    n, d = sums[:, 0::2], sums[:, 1::2]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(d > 0, n / np.where(d > 0, d, 1), np.nan)
    return {name: percentile_interval(ratios[:, i]) for i, name in enumerate(parts)}


def per_run_parts(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per task and repeat: the population variance across variants of that repeat's
    scores (0 where fewer than 2 variants scored) and whether it counts (tasks x repeats)."""
    n = np.sum(~np.isnan(scores), axis=1)
    ok = n >= 2
    var = np.zeros(n.shape)
    if ok.any():
        var[ok] = np.nanvar(np.moveaxis(scores, 2, 1)[ok], axis=1)
    return var, ok


def per_run_reading(var: np.ndarray, ok: np.ndarray, weights: np.ndarray | None = None
                    ) -> np.ndarray | float:
    """HAL's per-run S_prompt: per repeat (one HAL run), 1 - the mean over its tasks with 2+
    scored variants of their variance; then the mean over repeats that have such tasks.
    With `weights` (resamples x tasks), one value per resample."""
    w = np.ones((1, len(var))) if weights is None else weights
    num, den = w @ var, w @ ok.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_repeat = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    runs = np.sum(den > 0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(runs > 0, 1 - np.nansum(per_repeat, axis=1) / np.maximum(runs, 1),
                         np.nan)
    return float(value[0]) if weights is None else value


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k repeats drawn from n (c resolved) resolves."""
    return 1 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all k repeats drawn from n (c resolved) resolve."""
    return math.comb(c, k) / math.comb(n, k)


def pass_parts(orig: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task: pass@k, pass^k (0 where fewer than k non-error repeats) and whether the
    task counts (n >= k), over the original prompt's repeats."""
    n = np.sum(~np.isnan(orig), axis=1).astype(int)
    c = np.sum(orig == 1, axis=1).astype(int)
    ok = n >= k
    at = np.array([pass_at_k(a, b, k) if o else 0.0 for a, b, o in zip(n, c, ok, strict=True)])
    hat = np.array([pass_hat_k(a, b, k) if o else 0.0 for a, b, o in zip(n, c, ok, strict=True)])
    return at, hat, ok


def _pass_figures(orig: np.ndarray, fig: AgentFigures) -> dict[str, tuple]:
    """pass@k and pass^k over the original prompt's repeats, k = 1..repeats; returns the
    per-task parts their intervals are drawn from."""
    parts = {}
    for k in range(1, orig.shape[1] + 1):
        at, hat, ok = pass_parts(orig, k)
        fig.tasks_left_out[f"pass@{k}"] = int(np.sum(~ok))
        if ok.any():
            fig.pass_at_k[k], fig.pass_hat_k[k] = float(at[ok].mean()), float(hat[ok].mean())
            for name, part in ((f"pass@{k}", at), (f"pass^{k}", hat)):
                parts[name] = (part, ok.astype(float))
                fig.denominators[name] = int(ok.sum())
    return parts


def resource_parts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per task: the sum over its (variant) groups of exp(-CV) across repeats (sample std /
    mean), and how many groups count (2+ values and a mean above 0)."""
    n = np.sum(~np.isnan(values), axis=2)
    safe = np.maximum(n, 1)
    mean = np.nansum(values, axis=2) / safe
    sd = np.sqrt(np.nansum((values - mean[..., None]) ** 2, axis=2) / np.maximum(n - 1, 1))
    ok = (n >= 2) & (mean > 0)
    term = np.where(ok, np.exp(-sd / np.where(ok, mean, 1)), 0.0)
    return term.sum(axis=1), ok.sum(axis=1).astype(float)


def resource_consistency(values: np.ndarray) -> float:
    """C_res = mean over (task, variant) of exp(-CV) across repeats (sample std / mean);
    groups with fewer than 2 values or a zero mean are left out."""
    num, den = resource_parts(values)
    return float(num.sum() / den.sum()) if den.sum() else math.nan


def _sensitivity(fig: AgentFigures, per: dict[str, np.ndarray]) -> None:
    """The seed's figures, over the tasks with 2 or more scored variants."""
    sens = per["sens_valid"]
    fig.num_tasks = int(sens.sum())
    fig.tasks_left_out["sensitivity"] = int(fig.tasks - fig.num_tasks)
    if fig.num_tasks:
        var, gaps = per["variance"][sens], per["min_max_gap"][sens]
        fig.mean_variance, fig.std_variance = float(var.mean()), float(var.std())
        fig.S_prompt = 1 - fig.mean_variance
        fig.mean_min_max_gap, fig.max_min_max_gap = float(gaps.mean()), float(gaps.max())


def _pooled(fig: AgentFigures, contrib: np.ndarray) -> None:
    """The figures that are ratios of per-task sums (those the bootstrap resamples)."""
    s = contrib.sum(0)
    point = {name: float(x) for name, x in figures_from_sums(s).items()}
    fig.resolved_rate_excl_errors = point["resolved_rate_excl_errors"]
    fig.C_out, fig.accuracy_gap = point["C_out"], point["accuracy_gap"]
    fig.sigma2_run, fig.sigma2_prompt = point["sigma2_run"], point["sigma2_prompt"]
    fig.accuracy_original = point["accuracy_original"]
    fig.accuracy_variants = point["accuracy_variants"]
    fig.R_prompt_unclamped = point["R_prompt"]
    fig.R_prompt = min(1.0, point["R_prompt"]) if math.isfinite(point["R_prompt"]) else math.nan
    if fig.variants > 1 and not fig.accuracy_original:
        fig.notes.append("R_prompt is NaN: the accuracy on original prompts is 0")


def _per_run(fig: AgentFigures, scores: np.ndarray, weights: np.ndarray) -> None:
    var, ok = per_run_parts(scores)
    fig.S_prompt_per_run = float(per_run_reading(var, ok))
    if ok.any():
        fig.intervals["S_prompt_per_run"] = percentile_interval(
            np.asarray(per_run_reading(var, ok, weights)))
    fig.denominators["S_prompt_per_run"] = int(ok.any(axis=1).sum())


def _denominators(fig: AgentFigures, per: dict[str, np.ndarray]) -> None:
    """Tasks behind each pooled figure, and one note naming the figures whose interval rests
    on fewer than MIN_TASKS tasks."""
    behind = {"resolved_rate_excl_errors": per["orig_n"] > 0, "S_prompt": per["sens_valid"],
              "R_prompt": (per["orig_n"] > 0) & (per["var_n"] > 0),
              "accuracy_gap": per["gap_valid"], "C_out": per["cout_valid"],
              "sigma2_run": np.isfinite(per["sigma2_run"]),
              "sigma2_prompt": np.isfinite(per["sigma2_prompt"])}
    fig.denominators.update({name: int(ok.sum()) for name, ok in behind.items()})
    few = [name for name, d in fig.denominators.items()
           if 0 < d < MIN_TASKS and math.isfinite(fig.intervals.get(name, (math.nan,))[0])]
    if few:
        fig.notes.append(f"too few tasks (under {MIN_TASKS}) for these intervals to be "
                         f"trusted, they are too narrow: {', '.join(few)}")


def _predictability(fig: AgentFigures, answers: Answers, weights: np.ndarray,
                    seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Abstention (every agent) and calibration (agents that report a confidence); returns
    the abstention figures' per-task parts, for their intervals."""
    parts = abstention_parts(answers)
    for name, (num, den) in parts.items():
        if den.sum():
            setattr(fig, name, float(num.sum() / den.sum()))
            fig.denominators[name] = int(np.sum(den > 0))
    fig.calibration = calibration(answers, weights, seed)
    if fig.calibration:
        fig.intervals.update(fig.calibration.intervals)
        fig.denominators.update(dict.fromkeys(fig.calibration.intervals,
                                              fig.calibration.tasks))
        fig.notes += fig.calibration.notes
    return parts


def agent_figures(agent: str, scores: np.ndarray, *, resources: dict[str, np.ndarray] | None
                  = None, errors: int = 0, seed: int = DEFAULT_SEED,
                  resamples: int = DEFAULT_RESAMPLES, answers: Answers | None = None
                  ) -> tuple[AgentFigures, dict]:
    """Every figure of one agent, and the per-task arrays they came from."""
    t, v, k = scores.shape
    per = task_figures(scores)
    fig = AgentFigures(agent=agent, tasks=t, variants=v, repeats=k, error_items=errors,
                       items=int(np.sum(~np.isnan(scores))) + errors)
    weights = resample_weights(seed, t, resamples)
    _sensitivity(fig, per)
    contrib = contributions(per)
    _pooled(fig, contrib)
    fig.intervals = _intervals(weights, contrib)
    _per_run(fig, scores, weights)
    fig.tasks_left_out["C_out"] = int(t - per["cout_valid"].sum())
    # every ratio-of-sums figure beyond _CONTRIB: their intervals in one matrix product
    parts = {} if answers is None else _predictability(fig, answers, weights, seed)
    if k >= 2:
        fig.tasks_left_out["sigma2_prompt"] = int(np.sum(np.isnan(per["sigma2_prompt"])))
        parts.update(_pass_figures(scores[:, 0, :], fig))
        for name, arr in (resources or {}).items():
            num, den = resource_parts(arr)
            if den.sum():
                fig.C_res[name] = float(num.sum() / den.sum())
                parts[f"C_res_{name}"] = (num, den)
                fig.denominators[f"C_res_{name}"] = int(np.sum(den > 0))
    else:
        fig.notes.append("repeats = 1: C_out, pass^k, sigma2_run and sigma2_prompt need 2+")
    fig.intervals.update(_ratio_intervals(weights, parts))
    _denominators(fig, per)
    return fig, per


def scores_array(rows: Sequence[tuple[str, str, int, float | None]]
                 ) -> tuple[np.ndarray, list[str], list[str]]:
    """(task, variant, repeat, score or None) rows as `scores[task, variant, repeat]`:
    variant 0 is `original`, the others in name order; NaN where no score."""
    tasks = sorted({r[0] for r in rows})
    variants = sorted({r[1] for r in rows} - {"original"})
    variants = ["original", *variants]
    repeats = max((r[2] for r in rows), default=-1) + 1
    ti = {t: i for i, t in enumerate(tasks)}
    vi = {v: i for i, v in enumerate(variants)}
    out = np.full((len(tasks), len(variants), max(repeats, 1)), np.nan)
    for task, variant, repeat, score in rows:
        if score is not None:
            out[ti[task], vi[variant], repeat] = score
    return out, tasks, variants
