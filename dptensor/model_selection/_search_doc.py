"""The private searches' shared docstring: what they release, how they run, their parameters and
attributes (each search fills in its own grid parameter)."""

__all__ = ["SEARCH_DOC"]

SEARCH_DOC = """
    The search releases ``best_params_``, ``best_score_`` (the chosen run's noisy score) and the
    refitted ``best_estimator_``, all covered by one ``(epsilon, delta)`` recorded with the
    accountant as one :class:`~dptensor.accounting.PrivateSelectionEvent` before the first fit.

    How it runs (Papernot & Steinke 2022). The units (rows of ``X``; for
    :class:`~dptensor.PrivateTensorCompletion`, observed entries) are split once, at random from the
    search's seed, into a training part and a validation part of share ``validation_fraction``.
    The search draws a random number of runs ``K`` (mean ``n_runs``; the law is chosen by
    ``distribution``); each run trains a uniformly random candidate privately on the training part
    and releases its score on the validation part (the estimator's ``score``, bounded per unit,
    plus Gaussian noise at its sensitivity). Only the best run is output: neither ``K`` nor the
    other runs are released. With ``refit=True`` the chosen candidate is then fitted privately on
    all the data.

    Budget. The grid gives every hyperparameter except ``epsilon``, ``delta``, ``accountant`` and
    ``random_state``, which the search sets (nor may it vary ``data_norm`` or ``value_range``, which
    set the scale of the scores being compared): every candidate trains at one common
    ``candidate_epsilon_`` (at the search's delta), its score is released with the same Gaussian-DP
    parameter, and the refit trains at that epsilon too. ``candidate_epsilon_`` is the largest value
    for which the whole search (runs, selection and refit, priced in Rényi DP and converted to
    ``delta``) costs at most ``epsilon``; ``privacy_cost(n_samples, n_features)`` shows it before
    any data is read. A changed unit lies in one part only, so a run costs the larger of its fit's
    and its score's costs, not their sum; derived in ``docs/derivations/private_selection.rst``.

    Parameters
    ----------
    estimator : dptensor estimator or Pipeline
        A dptensor estimator, or a pipeline whose last step is one and whose other steps are
        stateless and act on each row alone (such as ``Normalizer``); a ``FunctionTransformer``
        is refused, since its function may mix rows.
    {grid}
    epsilon : float
        The whole search's budget (finite).
    delta : float or None, default=None
        ``None`` takes the accountant's delta (1e-5 without an accountant).
    n_runs : float or None, default=None
        Expected number of runs ``E[K]`` (in [1, ``MAX_RUNS``] = [1, 1e5]); ``None``: the number
        of candidates. More runs try more candidates and cost more, logarithmically.
    validation_fraction : float, default=0.2
        Share of the units held out to score candidates. Refused (before any spend) when the
        score's noise std would exceed ``MAX_SCORE_NOISE`` of one unit's score range.
    distribution : str or float, default="auto"
        ``"auto"``, ``"logarithmic"``, ``"negative_binomial_0.5"``, ``"geometric"``, ``"poisson"``,
        or a shape >= 0. The law of the number of runs: a truncated negative binomial of the given
        shape (0 is the
        logarithmic law, 1 the geometric) or Poisson. ``"auto"`` prices each and takes the cheapest
        (Poisson only when it draws no run with probability ``exp(-n_runs) <= 1%``).
    refit : bool, default=True
        Fit the chosen candidate on all the data (``best_estimator_``), within the same budget.
        With ``refit=False`` there is no model: ``transform``, ``predict``, ``score`` and
        ``set_output`` raise ``AttributeError`` saying so (as scikit-learn's searches do).
    accountant : PrivacyAccountant or None, default=None
        Records the whole search as one spend, before the first fit; refuses it if over budget.
        ``None``: the accountant found in what is searched, if any (on the estimator, any
        pipeline step at any depth, an estimator held as a parameter, a grid value), is charged
        the same way. Two different accountants (this one and one found, or two found), or one
        held where the search cannot take it off its runs, are refused before any spend. The
        runs record nothing themselves (one ledger entry per run would count them), and the
        refitted ``best_estimator_`` gets back the accountants it held, for its later fits.
    random_state : None, int or Generator, default=None
        ``None`` (fresh entropy) for real releases.
    n_jobs : int or None, default=None
        Runs fitted and scored at once, on threads (``None``: 1; ``-1``: every CPU). The price,
        the ledger entry and, for a fixed seed, every released value are the same for any
        ``n_jobs``: each run's candidate, fit seed and score-noise generator are drawn before
        any run starts, in a fixed order, so no two runs share a noise stream and none depends on
        which thread runs it. The memory check before the spend counts ``n_jobs`` fits at once.
    verbose : int, default=0
        Prints two lines: the price before the spend (from public shapes and parameters) and the
        choice at the end (released values). Nothing else: see *Output* below.

    Attributes
    ----------
    best_params_ : dict
        The chosen candidate's hyperparameters.
    best_score_ : float
        Its released (noisy) validation score; NaN when no run was drawn (Poisson law only: the
        choice is then uniformly random, independent of the data).
    best_index_ : int
        Its index in ``cv_results_["params"]``.
    best_estimator_ : estimator
        The chosen candidate refitted on all the data (``refit=True``).
    cv_results_ : dict of arrays
        Released values only: ``params`` (every candidate, public), ``param_<name>``,
        ``split0_test_score`` and ``mean_test_score`` (the chosen candidate's released score on
        the one split, NaN elsewhere: the other runs' scores are not released),
        ``std_test_score`` (0 for the chosen: one split has no spread; NaN elsewhere) and
        ``rank_test_score`` (1 for the chosen, 2 for the others). No timing keys
        (``mean_fit_time``, ``std_score_time``, ...) and no ``refit_time_``: a fit's time is an
        unnoised function of the data (and the runs' times would count the runs, which are
        secret), so the search releases none.
    n_splits_ : int
        1: the units are split once into a training and a validation part.
    feature_names_in_ : ndarray of str
        The DataFrame's column names, from ``best_estimator_`` (``refit=True``).
    candidate_epsilon_ : float
        The epsilon each candidate's fit (and the refit) targeted.
    distribution_ : str
        The law of the number of runs used.
    privacy_cost_ : PrivacyCost
        The whole search's cost, as recorded.

    Notes
    -----
    **Guarantee.** ``(epsilon, delta)``-DP for the estimator's unit (a row; an observed entry's
    value for completion) as a whole: choice, released score and refit. The search's wall time
    grows with the number of runs, which is not covered; neither is anything computed from the
    data outside ``fit`` (``score`` reads data exactly).

    **Output.** The runs' number and outcomes are secret, so nothing a run does (fitting,
    transforming, scoring) reaches ``sys.stdout``, ``sys.stderr``, file descriptors 1 and 2,
    ``warnings`` or ``logging``: a pipeline's or step's ``verbose``, a user's step or a library
    that prints, warns or logs, all are silenced, in this process or in a joblib worker running
    the search. The refit is silenced too: that it happens is public, but what it prints could
    depend on the data. joblib calls inside run in the search's process.

    **Differences from scikit-learn.** One train/validation split, not k folds (k folds would train
    each unit's candidates k times); only the chosen run's score is released; failures are not
    turned into NaN scores (a candidate whose fit raises stops the search, after its spend).
"""
