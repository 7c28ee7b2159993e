"""The statistical core: martingales, detectors, OOD scorers, FDR decision rules, diagnosis,
conformal scores and the fleet rules. Computation only, no I/O: it imports nothing of the
layers above (docs/architecture.md)."""
