"""The steps of one work item, shared by both engines: `solve` (`solve_item`, awaited,
or `solve_step` without an event loop: ask the agent), the test step (`run.sh`, which
wraps the task's eval script, run by a sandbox's `run_test_step` or in a Job's pod) and
`grade` (`grade_step`: read the test log, decide the outcome, keep result.json and
report.json), over a `workdir` (the files the steps hand each other; its docstring lists
them). The one-machine engine calls these functions in-process; a Job's containers call
the same ones through `proctor runner solve|grade`, and its task container runs the same
run.sh. `artifacts` packs what a Job's pod leaves.
"""
