"""dptensor's benchmark suite: each bench_*.py module compares an estimator with its peers."""
