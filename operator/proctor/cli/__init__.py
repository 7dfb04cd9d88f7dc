"""The `proctor` command: `main` parses and dispatches (`proctor.cli.main:main`).

Modules only the command uses sit beside it: `eval_options` (swebench-style options of
`proctor eval`), `demo` (`proctor demo`: reference agents, a run, the analysis).
"""
