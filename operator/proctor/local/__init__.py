"""The one-machine engine (`proctor run`, `eval`, `validate`): `engine` runs every item
(solve, test, grade) with bounded concurrency, `resume` decides what a rerun keeps,
`validate` checks a dataset with gold and empty patches. It never imports `proctor.k8s`.
"""
