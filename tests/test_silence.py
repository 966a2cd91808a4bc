"""``silenced()``: nothing inside a block reaches the streams, the descriptors, warnings or logging."""
import ctypes
import logging
import os
import sys
import threading
import warnings

from joblib import Parallel, delayed
from joblib.externals.loky import get_reusable_executor

from dptensor._guards import silenced


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_nothing_inside_reaches_streams_descriptors_warnings_or_logging(capfd):
    log = logging.getLogger("tests.silence")
    handler = _Records()
    log.addHandler(handler)
    filters, disabled = list(warnings.filters), logging.root.manager.disable
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with silenced():
                print("print")
                sys.stderr.write("stderr\n")
                sys.__stdout__.write("dunder stdout\n")
                os.write(1, b"descriptor 1\n")
                os.write(2, b"descriptor 2\n")
                ctypes.CDLL(None).printf(b"compiled code\n")  # C's buffer, flushed on exit
                warnings.warn("warned")
                log.error("logged")
                log.log(logging.CRITICAL + 10, "logged above critical")
                with silenced():  # nested: the outer block stays silent after the inner one
                    pass
                print("after the inner block")
        assert caught == [] and handler.records == []
        out, err = capfd.readouterr()
        assert out == "" and err == ""
        assert list(warnings.filters) == filters and logging.root.manager.disable == disabled
        print("visible")
        os.write(2, b"visible\n")
        log.error("visible")
        out, err = capfd.readouterr()
        assert out == "visible\n" and err == "visible\n" and len(handler.records) == 1
        try:  # an error inside ends the block too
            with silenced():
                raise KeyError("inside")
        except KeyError:
            os.write(1, b"after an error\n")
        assert capfd.readouterr().out == "after an error\n"
    finally:
        log.removeHandler(handler)


def test_a_block_stays_silent_when_another_thread_ends_its_own(capfd):
    """Blocks overlapping in two threads: the first to end must not unsilence the other, and the
    last to end restores everything (before, each thread restored the streams it had found)."""
    entered, first_done = threading.Event(), threading.Event()

    def second():
        with silenced():
            entered.set()
            first_done.wait(10)
            print("second thread, after the first ended")
            os.write(1, b"second thread, descriptor\n")

    with silenced():
        thread = threading.Thread(target=second)
        thread.start()
        entered.wait(10)
    first_done.set()
    thread.join(10)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    print("restored")
    assert capfd.readouterr().out == "restored\n"


def test_joblib_inside_runs_in_the_process_the_block_silences(capfd):
    """A worker process started before the block writes to the descriptors it inherited then: a
    ``Parallel`` call inside the block runs in the calling process instead."""
    get_reusable_executor().shutdown(wait=True)  # workers started here inherit capfd's descriptors
    Parallel(n_jobs=2)(delayed(os.getpid)() for _ in range(4))
    with silenced():
        pids = Parallel(n_jobs=2)(delayed(_write_pid)() for _ in range(4))
    assert set(pids) == {os.getpid()}
    assert capfd.readouterr() == ("", "")
    get_reusable_executor().shutdown(wait=True)


def _write_pid():
    os.write(1, b"from a worker\n")
    return os.getpid()

