"""The ground floor: what Proctor's data is and the pure rules over it, with no I/O.

* `model`: tasks, work items, results, summaries (the versioned records on disk);
* `spec`: the Evaluation and AgentUnderTest resources;
* `plan`: the work items of an evaluation; `patches`: checks of a patch's text;
* `grading`: the outcome tree; `metrics`: the leaderboard figures; `report`: report.md;
* `report_json`: swebench's per-instance report; `result_files`: an item's graded files
  (result.json, report.json), named and made in that one module;
* `images`: a task's image name; `exits`: what an exit status means, and the errors
  that carry one; `labels`: the keys of the labels and annotations Proctor sets.

Every other package may import this one; it imports none of them.
"""
