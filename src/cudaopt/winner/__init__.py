"""A run's winner after the run: checked again on fresh inputs and the holdout (verify), measured
again beside its baseline (replay), timed on other shapes (shapes) and run under
compute-sanitizer (sanitize)."""
