"""An Evaluation's reconcile: observe and decide (pure), its status, act, and the pass."""
