"""`proctor analyze`: reliability figures of one or many results folders.

    load (load.py) -> figures per agent (proctor.analysis.reliability, pure) and paired
    comparisons (compare.py, tests in inference.py) -> CSVs (tables.py), PNGs (plots.py),
    sensitivity_report.md (markdown.py)

`run` computes and writes it all. `proctor compare` is the paired part alone:
compare_report.md, comparison.csv, sample_size.csv.

Written under the output folder:

    agent_level_sensitivity.csv   task_level_sensitivity.csv   reliability_metrics.csv
    variants.csv                  comparisons.csv (two agents or more)
    sensitivity_comparison.png    task_sensitivity_distribution.png
    most_sensitive_tasks.png      accuracy_original_vs_variants.png   (with variants)
    variance_components.png       (variants and repeats)
    pass_k_curve.png              outcome_consistency.png             (repeats)
    calibration_bins.csv          calibration.png         (an agent reported confidences)
    sensitivity_report.md
"""
