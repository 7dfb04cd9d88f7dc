#!/usr/bin/env python3
"""Proctor's reliability figures against HAL's own analysis code, on the same per-item scores.

    python scripts/hal_crosscheck.py --hal HAL_CHECKOUT RESULTS... [--tolerance 1e-9]

HAL_CHECKOUT is a checkout of princeton-pli/hal-harness; nothing of it is installed: its
functions are loaded from `reliability_eval/metrics/*.py` and, for prompt sensitivity, the
method `BaseBenchmark._calculate_sensitivity_metrics` is taken out of
`hal/benchmarks/base_benchmark.py` (whose module imports HAL's Weave client) and run as
written. `reliability_eval/metrics/consistency.py` imports scipy and pandas at the top;
where they are not installed, empty stand-ins are put in their place (the two functions
used here, outcome and resource consistency, touch neither).

Proctor loads the results folders and computes every figure (`proctor analyze`'s code);
the same items (errors left out, scores 1 if resolved else 0) are then given to HAL's
functions in the shapes HAL reads them:

* prompt sensitivity: `_calculate_sensitivity_metrics({task: [variant means]})` ->
  S_prompt (1 - mean_variance), std_variance, mean/max min-max gap, num_tasks and every
  task's variance; per repeat on that repeat's scores -> S_prompt_per_run (the mean over
  repeats of 1 - mean_variance);
* R_prompt: `compute_robustness_ratio(original runs, variant runs)`, a run per
  (variant, repeat) of `{task: {"reward": score}}`;
* C_out: `compute_outcome_consistency` of each task's original-prompt repeats, averaged
  over the tasks where it is defined;
* C_res: `compute_resource_consistency` of each (task, variant)'s repeats (latency as
  HAL's times, cost as its costs, tokens as costs: the same formula), averaged;
* calibration: `compute_ece_metrics`, `compute_brier_metrics`, `compute_auroc_metrics`
  on every scored item with a confidence;
* abstention: `compute_abstention_metrics`, an item without a patch abstaining.

Prints each figure both compute, side by side; exit 1 when any differs by more than the
tolerance, 2 on bad input.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

from proctor.analysis import AnalysisError, compute
from proctor.analysis.load import AgentRun, load_agents


def _module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _stand_ins() -> list[str]:
    """Empty scipy / pandas modules where they are not installed; returns which."""
    missing = []
    for name in ("scipy", "pandas"):
        if importlib.util.find_spec(name) is None:
            missing.append(name)
            sys.modules[name] = types.ModuleType(name)
    if "scipy" in missing:
        for sub in ("scipy.spatial", "scipy.spatial.distance"):
            sys.modules[sub] = types.ModuleType(sub)
        sys.modules["scipy.spatial.distance"].jensenshannon = None  # type: ignore[attr-defined]
    return missing


def load_hal(root: Path) -> tuple[dict[str, Callable], list[str]]:
    """HAL's functions by name, and the stand-ins used."""
    package = root / "reliability_eval"
    if not (package / "metrics" / "predictability.py").is_file():
        raise SystemExit(f"--hal {root}: not a hal-harness checkout (no reliability_eval/)")
    missing = _stand_ins()
    pkg = types.ModuleType("reliability_eval")
    pkg.__path__ = [str(package)]  # a package, without running its __init__
    sys.modules["reliability_eval"] = pkg
    metrics = types.ModuleType("reliability_eval.metrics")
    metrics.__path__ = [str(package / "metrics")]
    sys.modules["reliability_eval.metrics"] = metrics
    _module("reliability_eval.constants", package / "constants.py")
    found: dict[str, Callable] = {}
    for name in ("predictability", "robustness", "consistency", "abstention"):
        mod = _module(f"reliability_eval.metrics.{name}", package / "metrics" / f"{name}.py")
        found.update({k: v for k, v in vars(mod).items() if k.startswith("compute_")})
    found["sensitivity"] = _sensitivity_method(root / "hal" / "benchmarks" / "base_benchmark.py")
    return found, missing


def _sensitivity_method(path: Path) -> Callable:
    """BaseBenchmark._calculate_sensitivity_metrics, as written, as a plain function."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_calculate_sensitivity_metrics":
            scope: dict = {"Dict": dict, "Any": object}
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            exec(code, scope)  # HAL's own method body, unchanged
            method = scope["_calculate_sensitivity_metrics"]
            return lambda results: method(None, results, {})
    raise SystemExit(f"{path} has no _calculate_sensitivity_metrics")


def _means(row: np.ndarray) -> list[float]:
    """A task's variant means over their non-error repeats (variants with none left out)."""
    return [float(np.nanmean(v)) for v in row if np.any(~np.isnan(v))]


def hal_figures(run: AgentRun, hal: dict[str, Callable]) -> dict[str, float]:
    """Every figure HAL's code gives for the run's items."""
    s = run.scores
    out: dict[str, float] = {}
    sens = hal["sensitivity"]({t: _means(s[i]) for i, t in enumerate(run.tasks)})
    if sens["num_tasks"]:
        out.update(S_prompt=1 - sens["mean_variance"], std_variance=sens["std_variance"],
                   mean_min_max_gap=sens["mean_min_max_gap"],
                   max_min_max_gap=sens["max_min_max_gap"])
    out["num_tasks"] = sens["num_tasks"]
    out["_task_variances"] = sens["task_variances"]  # type: ignore[assignment]
    per_run = []
    for k in range(s.shape[2]):
        one = hal["sensitivity"]({t: [float(x) for x in s[i, :, k] if not np.isnan(x)]
                                  for i, t in enumerate(run.tasks)})
        if one["num_tasks"]:
            per_run.append(1 - one["mean_variance"])
    if per_run:
        out["S_prompt_per_run"] = float(np.mean(per_run))

    def runs(variants: range) -> list[dict]:
        return [{"raw_eval_results": {t: {"reward": float(s[i, j, k])}
                                      for i, t in enumerate(run.tasks)
                                      if not np.isnan(s[i, j, k])}}
                for j in variants for k in range(s.shape[2])]

    if s.shape[1] > 1:
        ratio, _ = hal["compute_robustness_ratio"](runs(range(1)), runs(range(1, s.shape[1])))
        out["R_prompt"] = float(ratio)
    cout = [hal["compute_outcome_consistency"]([int(x) for x in s[i, 0] if not np.isnan(x)])
            for i in range(len(run.tasks))]
    if any(np.isfinite(cout)):
        out["C_out"] = float(np.nanmean(cout))
    out.update(_resources(run, hal))
    out.update(_predictability(run, hal))
    return out


def _resources(run: AgentRun, hal: dict[str, Callable]) -> dict[str, float]:
    out = {}
    for name, values in run.resources.items():
        per = []
        for group in values.reshape(-1, values.shape[2]):
            kept = [float(x) for x in group if not np.isnan(x)]
            times, costs = (kept, []) if name == "latency" else ([], kept)
            value, _ = hal["compute_resource_consistency"](costs, times, [])
            if not np.isnan(value):
                per.append(value)
        if per:
            out[f"C_res_{name}"] = float(np.mean(per))
    return out


def _predictability(run: AgentRun, hal: dict[str, Callable]) -> dict[str, float]:
    a = run.answers
    if a is None:
        return {}
    scored = np.isfinite(a.resolved)
    items = [{"reward": float(r), "abstention": {"abstained": bool(p)}}
             for r, p in zip(a.resolved[scored], a.patchless[scored], strict=True)]
    abst = hal["compute_abstention_metrics"]([{"raw_eval_results": dict(enumerate(items))}])
    out = {name: math.nan if abst[name] is None else float(abst[name])  # HAL's NaN is None
           for name in ("abstention_rate", "selective_accuracy")}
    has = scored & np.isfinite(a.confidence)
    if has.any():
        conf, y = a.confidence[has], a.resolved[has]
        out.update(ece=float(hal["compute_ece_metrics"](conf, y)["ece"]),
                   brier=float(hal["compute_brier_metrics"](conf, y)["brier_score"]),
                   auroc=float(hal["compute_auroc_metrics"](conf, y)["predictability_roc_auc"]))
    return out


def proctor_figures(fig, per_task: dict[str, float]) -> dict[str, float]:
    """Proctor's values of the same figures."""
    out = {name: float(getattr(fig, name)) for name in
           ("S_prompt", "std_variance", "mean_min_max_gap", "max_min_max_gap", "num_tasks",
            "S_prompt_per_run", "R_prompt", "C_out", "abstention_rate", "selective_accuracy")}
    out.update({f"C_res_{k}": v for k, v in fig.C_res.items()})
    if fig.calibration:
        out.update(ece=fig.calibration.ece, brier=fig.calibration.brier,
                   auroc=fig.calibration.auroc)
    out["_task_variances"] = per_task  # type: ignore[assignment]
    return out


def _differ(a: float, b: float, tol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    return not abs(a - b) <= tol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hal", type=Path, required=True, help="a hal-harness checkout")
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--tolerance", type=float, default=1e-9)
    args = parser.parse_args(argv)
    hal, missing = load_hal(args.hal)
    try:
        runs = load_agents(args.results, "resolved")
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    analysis = compute(runs, resamples=10)
    if missing:
        print(f"(stand-ins for {', '.join(missing)}: not installed; the functions compared "
              f"use neither)")
    compared = differing = 0
    print(f"{'agent':<16} {'figure':<22} {'Proctor':>20} {'HAL':>20}  agree")
    for run, fig in zip(analysis.runs, analysis.figures, strict=True):
        rows = [r for r in analysis.task_rows if r[5] == run.agent]
        ours = proctor_figures(fig, {str(r[0]): float(r[1]) for r in rows})
        theirs = hal_figures(run, hal)
        for name in sorted(set(ours) & set(theirs) - {"_task_variances"}):
            bad = _differ(ours[name], theirs[name], args.tolerance)
            compared, differing = compared + 1, differing + bad
            print(f"{run.agent:<16} {name:<22} {ours[name]:>20.15g} {theirs[name]:>20.15g}  "
                  f"{'NO' if bad else 'yes'}")
        tv_ours, tv_hal = ours["_task_variances"], theirs["_task_variances"]
        worst = max((abs(tv_ours[t] - tv_hal[t]) for t in tv_hal), default=0.0)
        bad = set(tv_ours) != set(tv_hal) or worst > args.tolerance
        compared, differing = compared + 1, differing + bad
        print(f"{run.agent:<16} {'task variances':<22} {len(tv_ours):>20} {len(tv_hal):>20}  "
              f"{'NO' if bad else 'yes'} (largest difference {worst:.1e})")
    print(f"{compared} figures compared: {compared - differing} agree within "
          f"{args.tolerance:g}, {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
