"""Completion on observed entries: CP and Tucker models, ALS, DP-ALS, (DP) gradient descent,
offsets, the implicit-feedback interaction and the completion modes (:mod:`.modes`).

Plain functions on arrays, usable without scikit-learn. Every per-row sum runs over the observed
entries in one of two layouts, chosen from public quantities (:meth:`Observations.grid`), which
give the same sums to rounding:

* sparse (:class:`ModeLayout`): the entries are kept sorted by each mode, the rows of each factor
  that an entry uses are gathered into contiguous ``(rank, n_obs)`` arrays, and the sums over the
  entries of each row are one ``np.add.reduceat`` per pass. One epoch costs ``O(|Omega| rank^2
  order)`` for CP and ``O(|Omega| rank^(2 order - 2) order)`` for Tucker; memory is ``O(|Omega|
  rank^2 + sum(shape) rank)`` (CP) and no dense ``n1 x n2 x ...`` array is formed.
* dense (:class:`DenseGrid`), for tensors observed densely enough: the mask and the values on the
  full grid, every per-row sum a BLAS product of a grid array with a matrix indexed by the columns
  of the unfolding (an entry's design depends only on its column). One epoch costs
  ``O(prod(shape) rank^2 order)`` at BLAS speed; a few ``prod(shape)`` arrays are held.

Model, on values already centred and scaled by the caller::

    x_hat[e] = intercept + sum_m biases[m][X[e, m]] + f(X[e])
    f = sum_r prod_m U_m[i_m, r]                           (CP)
    f = core x_1 U_1[i_1] x_2 U_2[i_2] ... x_d U_d[i_d]    (Tucker, core rank^order)

Objective (both solvers)::

    1/2 sum_Omega (y - x_hat)^2 + reg/2 sum_m ||U_m||^2 + reg_core/2 ||core||^2

(+ ``reg/2 sum_m ||b_m||^2`` while ALS refines the biases).
"""
