"""The files Proctor reads and writes in other tools' formats, and its own manifests.

* `manifest`: Evaluation and AgentUnderTest YAML, checked against the CRDs (`crds/`)
  as the API server would check them;
* `predictions`: swebench's predictions files (`-p preds.jsonl`);
* `harness_logs`: swebench's run folder (`logs/run_evaluation/...`) and run report.
"""
