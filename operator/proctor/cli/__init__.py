"""The `proctor` command: `main` gathers the commands' parsers and dispatches
(`proctor.cli.main:main`).

Each command has its module, which declares its parser (`add_parser`) and runs it
(`cmd_*`, the parser's `func`): run, eval, demo, analyze, compare, variants, validate,
scenario, green, export, images, operator, render, crds, show, results, runner (`agent`'s
is `proctor.agents.cli`). Beside them: `options` (the options several commands share),
`summaries` (what a run prints at its end), `eval_options` (`proctor eval`'s swebench-style
options, turned into manifests).
"""
