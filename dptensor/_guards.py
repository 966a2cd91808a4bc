"""What a fit runs under once it has spent: floating-point settings the library fixes, and silence.

After the spend, a fit's behaviour is a release: an error, a warning or a printed line that
depends on the data tells something about the data that no noise covers. Two things a user (or a
library the user loaded) sets would make it so:

* NumPy's floating-point error settings: under ``np.errstate(all="raise")`` an underflow that
  one tiny row causes raises ``FloatingPointError`` where its neighbour fits.
  :func:`fixed_floating_point` runs the fit under NumPy's default settings (warn on divide,
  overflow and invalid, ignore underflow), whatever the caller's are; the suite turns every
  such warning from dptensor into an error, so none is left on any path it tests. It also runs
  it under scikit-learn's ``assume_finite=False``: with ``assume_finite=True`` scikit-learn's
  check skips NaN and infinity, so a fit's refusal of them before the spend would be skipped,
  and the NaN met after it (an error that depends on the data).
* Output from code the fit calls but does not own: a pipeline step's ``verbose``, a user's
  estimator that prints, a library that logs or warns, compiled code that writes to file
  descriptor 1 or 2. :func:`silenced` swallows all of it (``sys.stdout``, ``sys.stderr``, the
  descriptors, ``warnings`` and ``logging``) for the duration of a block, say the runs of a
  private search, whose number and outcomes are secret.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import logging
import os
import sys
import threading
import warnings

import joblib
import numpy as np
import sklearn

__all__ = ["fixed_floating_point", "as_dtype", "say", "silenced", "warn", "FLOATING_POINT_SETTINGS"]

#: NumPy's own defaults: the settings every fit runs under, whatever the caller's.
FLOATING_POINT_SETTINGS = dict(divide="warn", over="warn", under="ignore", invalid="warn")


def fixed_floating_point(func):
    """Decorate a public entry point (``fit``, ``partial_fit``, a spend) to run under
    :data:`FLOATING_POINT_SETTINGS`, whatever ``np.errstate`` the caller has set, and with
    scikit-learn's finiteness checks on, whatever its ``assume_finite``: the refusals of NaN and
    infinity before the spend are the guarantee's, not a check the caller may turn off."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with np.errstate(**FLOATING_POINT_SETTINGS), sklearn.config_context(assume_finite=False):
            return func(*args, **kwargs)
    wrapper.fixed_floating_point = True
    return wrapper


def as_dtype(values, dtype) -> np.ndarray:
    """Released values (computed in float64) in the fit's dtype, float32 for float32 rows: one
    beyond its range becomes inf, with no overflow warning, which would depend on the value."""
    with np.errstate(over="ignore"):
        return np.asarray(values).astype(dtype, copy=False)


class _Sink(io.TextIOBase):
    """A text stream that keeps nothing."""

    def writable(self):
        return True

    def write(self, text):
        return len(text)


def _flush_all():
    """Push out what sits in Python's and C's stream buffers, so it lands where it was written."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # a closed or foreign stream: nothing of ours to flush
            stream.flush()
    if _LIBC is not None:
        _LIBC.fflush(None)  # every C stdio stream: what a compiled extension printed


try:
    _LIBC = ctypes.CDLL(None)
except (OSError, TypeError):  # pragma: no cover - no C library to open by name (Windows)
    _LIBC = None


def _silence_descriptors(stack):
    """Point file descriptors 1 and 2 at the null device until ``stack`` closes, then restore
    them: what a compiled extension, a child process or ``sys.__stdout__`` writes goes nowhere."""
    _flush_all()
    null = os.open(os.devnull, os.O_WRONLY)
    stack.callback(os.close, null)
    for fd in (1, 2):
        try:
            saved = os.dup(fd)
        except OSError:  # pragma: no cover - not open in this process: nothing reaches it
            continue
        stack.callback(os.close, saved)
        stack.callback(os.dup2, saved, fd)
        os.dup2(null, fd)
    stack.callback(_flush_all)  # first at close: buffered output goes to the null device


# One silence for the whole process, held while any block is open: the streams, the warning
# filters and logging are process-wide, so blocks open in several threads must not restore them
# out of order (one thread's exit would unsilence another's block, or leave the sink installed).
_LOCK = threading.Lock()
_HELD = {"depth": 0, "stack": None}


def _hold():
    with _LOCK:
        if _HELD["depth"] == 0:
            with contextlib.ExitStack() as stack:
                _silence_descriptors(stack)
                sink = _Sink()
                stack.enter_context(contextlib.redirect_stdout(sink))
                stack.enter_context(contextlib.redirect_stderr(sink))
                stack.enter_context(warnings.catch_warnings())
                warnings.simplefilter("ignore")
                previous = logging.root.manager.disable
                logging.disable(_EVERY_LEVEL)
                stack.callback(logging.disable, previous)
                _HELD["stack"] = stack.pop_all()
        _HELD["depth"] += 1


def _release():
    with _LOCK:
        _HELD["depth"] -= 1
        if _HELD["depth"] == 0:
            _HELD.pop("stack").close()
            _HELD["stack"] = None


#: Above every level a logger can be given (custom levels above ``CRITICAL`` included).
_EVERY_LEVEL = sys.maxsize


@contextlib.contextmanager
def silenced():
    """Nothing inside reaches ``sys.stdout``, ``sys.stderr``, ``warnings`` or ``logging``.

    Python's streams go to a sink and file descriptors 1 and 2 to the null device (so compiled
    code and child processes are silent too); warnings are dropped and ``logging`` is switched
    off (``logging.disable``). joblib runs inside the block in the calling process (its
    ``"sequential"`` backend): a worker process started earlier writes to the descriptors it
    inherited then, which no redirection here reaches. Everything is restored when the block
    ends, exception or not. The silence is the process's: while a block is open in one thread,
    other threads are silent too (never the reverse: no thread's exit ends another's block).
    """
    with joblib.parallel_config(backend="sequential"):  # per thread, as joblib's settings are
        _hold()
        try:
            yield
        finally:
            _release()


def say(line: str) -> None:
    """Print ``line`` and its newline in one write: lines printed from parallel workers onto one
    stream (a search under an outer cross-validation's ``n_jobs``) never run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category=UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside dptensor, scikit-learn and joblib:
    the user's line (``model.fit(X)``, or the ``pipeline.fit(X)`` or ``cross_validate`` around
    it), however deep in the library the warning arises, so that it is shown at the code that
    caused it and ``warnings.filterwarnings(module=...)`` sees the user's module."""
    skipped = [_PACKAGE]
    for name in ("sklearn", "joblib"):  # a pipeline's, a search's or cross_validate's calls
        module = sys.modules.get(name)
        if getattr(module, "__file__", None):
            skipped.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            tuple(skipped)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
