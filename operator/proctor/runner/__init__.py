"""The steps of one work item, shared by both engines: `solve` (ask the agent),
`grade` (read the test log, decide the outcome), over a `workdir` (the files the steps
hand each other; its docstring lists them). `artifacts` packs what a Job's pod leaves.
`run.sh` wraps the task's eval script in the test step.
"""
