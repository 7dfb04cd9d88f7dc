"""Results folders of two agents over a few tasks, variants and repeats, written from tables
of outcomes (`write_folder`): what `proctor analyze` reads, small enough to check by hand."""

from __future__ import annotations

from pathlib import Path

from proctor.core.model import Outcome, PassFail, PatchInfo, RunResult, Timings, Usage

# task -> variant -> outcomes over repeats ("E" = error)
AGENT_A = {"t1": {"original": "RRN", "formal": "NNN", "terse": "RRR"},
           "t2": {"original": "RRR", "formal": "RRR", "terse": "RRE"},
           "t3": {"original": "NNN", "formal": "NRN", "terse": "EEE"},
           "t4": {"original": "EEE", "formal": "RRR", "terse": "NNN"}}
AGENT_B = {"t1": {"original": "NNN", "formal": "NNN", "terse": "NNN"},
           "t2": {"original": "RRR", "formal": "RRR", "terse": "RRR"},
           "t3": {"original": "NNN", "formal": "NNN", "terse": "NNN"}}
_OUTCOME = {"R": Outcome.RESOLVED, "N": Outcome.NO_OP, "E": Outcome.ERROR}


def write_folder(folder: Path, agent: str, table: dict, torn: bool = False,
                 confident: bool = False) -> Path:
    """With `confident`, each answer reports a confidence: 0.8 when it resolved (one in
    three 0.45), 0.3 when not."""
    folder.mkdir(parents=True)
    lines = []
    for task, variants in table.items():
        for variant, outcomes in variants.items():
            for k, code in enumerate(outcomes):
                lines.append(RunResult(
                    item_id=f"{task}-{variant}-{k}", instance_id=task, variant_id=variant,
                    repeat=k, outcome=_OUTCOME[code], patch=PatchInfo(present=code == "R"),
                    FAIL_TO_PASS=PassFail(success=["a"] if code == "R" else [],
                                          failure=[] if code == "R" else ["a"]),
                    timings=Timings(total_seconds=10.0 + k),
                    usage=Usage(total_tokens=100, cost_usd=0.5),
                    confidence=(None if not confident else 0.3 if code != "R"
                                else 0.45 if len(lines) % 3 == 0 else 0.8)
                    ).model_dump_json())
    text = "\n".join(lines) + "\n" + ('{"item_id": "torn' if torn else "")
    (folder / "results.jsonl").write_text(text)
    (folder / "spec.json").write_text(f'{{"spec": {{"agentRef": {{"name": "{agent}"}}}}}}')
    return folder
