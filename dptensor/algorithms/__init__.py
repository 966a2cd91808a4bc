"""The algorithms layer: arrays in, arrays out.

Plain functions and small classes that the estimators call: power methods, tensor power methods,
moment pipelines, completion solvers, the exact sums and the data operators. They take their
noise generator and noise plan as arguments and release through :mod:`dptensor.mechanisms`;
they know no estimator, no accountant and no scikit-learn, so each is usable on its own and
testable against a known truth.
"""
