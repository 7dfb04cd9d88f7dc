"""Reference agents under test: real A2A servers that answer SWE-bench tasks.

* `oracle`: the task's gold patch;
* `noop`: an answer without a patch;
* `editor`: edits the checkout named by REPO_DIR and answers with its diff;
* `mixed`: across the demo tasks, every outcome and every answer shape.

They check Proctor end to end without any model, and show agent authors what
Proctor sends and accepts. `proctor agent serve --kind KIND` runs one
(`python -m proctor.agents serve --kind KIND` also works); `server.py` holds the
server, `kinds.py` the answers.
"""
