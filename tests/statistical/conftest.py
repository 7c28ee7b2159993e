"""The statistical tests reuse the benchmark's experiment code (``bench/bench_statistical.py``):
the CI versions run fewer seeds with tolerances widened by their standard errors, the
``@pytest.mark.slow`` versions run the acceptance sizes."""
