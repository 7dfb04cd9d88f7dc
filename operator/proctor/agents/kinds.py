"""The reference agents' logic: one function per kind, `TaskRequest -> Answer`.

* `oracle` answers with the task's gold patch (a data part `{"patch": …}`);
* `noop` completes with prose and no patch;
* `editor` edits the checkout at REPO_DIR (it applies the gold patch there, as a
  real agent would edit files) and answers with `git diff` of it in a fence;
* `mixed` answers the demo tasks so that, across the demo dataset, every
  non-error outcome appears, in every answer shape (see `mixed_patches.json`);
* `llm` runs mini-swe-agent's loop on a litellm model in the checkout (see `llm.py`);
* `sensitive` answers with the gold patch with a chance that depends on the wording
  of the problem text (see `wording_chance`); given a seed, each answer is also a
  draw, so repeats of the same text may differ. It reports that chance as its
  confidence (metadata `confidence`), so its calibration figures are honest numbers.

They know the tasks from the bundled demo dataset and from any dataset files
they are given; a task is found by the data part's `instance_id`, or else by
its problem statement (for orchestrators that send text only).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.agents.answers import Answer, TaskRequest, usage_for
from proctor.agents.checkout import EditError, Solver, edit_checkout
from proctor.datasets import demo

if TYPE_CHECKING:
    from proctor.agents.llm import LlmSettings

KINDS = ("oracle", "noop", "editor", "mixed", "sensitive", "llm")
LOOKS_UP = tuple(k for k in KINDS if k not in ("noop", "llm"))
"""The kinds that find the task they are asked: with a reworded text, only by the data part
(AgentUnderTest taskData)."""


@dataclass(frozen=True)
class Tasks:
    """The rows the agents know, by instance id."""

    rows: Mapping[str, Mapping[str, Any]]

    @classmethod
    def load(cls, dataset_files: Iterable[str] = ()) -> Tasks:
        from proctor.datasets import read_rows

        rows = {r["instance_id"]: r for r in demo.load_rows()}
        for name in dataset_files:
            rows.update({r["instance_id"]: r for r in read_rows(name) if r.get("instance_id")})
        return cls(rows)

    @cached_property
    def _by_problem(self) -> dict[str, str]:
        return {str(r.get("problem_statement", "")).strip(): iid for iid, r in self.rows.items()}

    def find(self, request: TaskRequest) -> Mapping[str, Any] | None:
        if request.instance_id:
            return self.rows.get(request.instance_id)
        iid = self._by_problem.get(request.problem_text)
        return self.rows.get(iid) if iid else None


def _unknown(request: TaskRequest) -> Answer:
    return Answer(state="rejected",
                  text=f"I do not know the task {request.instance_id or '(no instance_id)'}.")


def oracle(tasks: Tasks) -> Solver:
    def solve(request: TaskRequest) -> Answer:
        row = tasks.find(request)
        if row is None:
            return _unknown(request)
        patch = str(row.get("patch") or "")
        return Answer(text="Here is the fix.", patch=patch, form="data",
                      usage=usage_for(request, patch))
    return solve


def noop(_tasks: Tasks) -> Solver:
    def solve(request: TaskRequest) -> Answer:
        return Answer(text="I read the issue but have no change to propose.",
                      usage=usage_for(request, ""))
    return solve


def editor(tasks: Tasks) -> Solver:
    def solve(request: TaskRequest) -> Answer:
        repo_dir = request.repo_dir
        if not repo_dir:
            return Answer(state="failed", text="The editor agent needs a REPO_DIR to edit; "
                                               "the message named none.")
        row = tasks.find(request)
        if row is None:
            return _unknown(request)
        try:
            diff = edit_checkout(Path(repo_dir), str(row.get("patch") or ""))
        except EditError as exc:
            return Answer(state="failed", text=f"Could not edit the checkout: {exc}")
        return Answer(text="I edited the files in REPO_DIR.", patch=diff, form="fence",
                      usage=usage_for(request, diff))
    return solve


def mixed_recipes() -> dict[str, dict[str, Any]]:
    """The mixed agent's answer for each demo task (see the file's `_about`)."""
    text = resources.files("proctor.agents").joinpath("mixed_patches.json").read_text()
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def mixed(tasks: Tasks) -> Solver:
    recipes = mixed_recipes()

    def solve(request: TaskRequest) -> Answer:
        row = tasks.find(request)
        recipe = recipes.get(str(row["instance_id"])) if row else None
        if recipe is None or row is None:
            return Answer(text="This task is not one I have an answer for.")
        patch = str(row.get("patch") or "") if recipe.get("patch") == "gold" else \
            str(recipe.get("patch") or "")
        return Answer(state=recipe.get("state", "completed"), text=recipe.get("text", ""),
                      patch=patch, form=recipe.get("form", "data"),
                      where=recipe.get("where", "artifact"),
                      data_key=recipe.get("data_key", "patch"), usage=usage_for(request, patch))
    return solve


ORIGINAL_CHANCE = 0.75
"""The sensitive agent's chance of solving a task asked in its original words."""


def wording_chance(original: str, text: str, instance_id: str) -> float:
    """The sensitive agent's chance of solving a task asked in `text`: 0.75 in the original
    words, else between 0.1 and 0.9, fixed by a hash of the wording."""
    if text.strip() == original.strip():
        return ORIGINAL_CHANCE
    digest = hashlib.sha256(f"{instance_id}\0{text.strip()}".encode()).digest()
    return 0.1 + 0.8 * int.from_bytes(digest[:4], "big") / 2 ** 32


def sensitive(tasks: Tasks, seed: int | None = None) -> Solver:
    """Solves with `wording_chance`: without a seed, whenever the chance is 0.5 or more;
    with one, by a draw per answer, seeded by (seed, wording, how often it was asked)."""
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def solve(request: TaskRequest) -> Answer:
        row = tasks.find(request)
        if row is None:
            return _unknown(request)
        chance = wording_chance(str(row.get("problem_statement") or ""), request.problem_text,
                                str(row["instance_id"]))
        if seed is None:
            solved = chance >= 0.5
        else:
            key = hashlib.sha256(request.problem_text.encode()).hexdigest()
            with lock:
                nth, asked[key] = asked[key], asked[key] + 1
            solved = random.Random(f"{seed}:{key}:{nth}").random() < chance
        patch = str(row.get("patch") or "") if solved else ""
        return Answer(text="Here is the fix." if solved else "I could not find a fix.",
                      patch=patch, form="data", usage=usage_for(request, patch),
                      confidence=round(chance, 4))
    return solve


_FACTORIES: dict[str, Callable[[Tasks], Solver]] = {
    "oracle": oracle, "noop": noop, "editor": editor, "mixed": mixed, "sensitive": sensitive}


def solver_for(kind: str, tasks: Tasks, seed: int | None = None,
               llm: LlmSettings | None = None) -> Solver:
    """The answer function of an agent kind (`seed` matters to `sensitive` only, `llm`
    to the `llm` kind, which needs it)."""
    if kind == "llm":
        if llm is None:
            raise ValueError("the llm agent needs a model (--model)")
        from proctor.agents.llm import llm as llm_solver  # mini-swe-agent loads only here
        return llm_solver(llm)
    if kind not in _FACTORIES:
        raise ValueError(f"unknown agent kind {kind!r}; choose one of {', '.join(KINDS)}")
    return sensitive(tasks, seed) if kind == "sensitive" else _FACTORIES[kind](tasks)
