"""edgeconv._log: logging's loggers, with logging imported only when a line may be printed (issue 38:
`edgeconv check` never imports it unless -v)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from edgeconv import _log

from ..conftest import REPO


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (one where nothing imported logging yet)."""
    prelude = "import sys\nfrom edgeconv import _log\nlog = _log.get_logger('edgeconv.probe')\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=REPO, check=True)


def test_a_line_no_handler_would_print_does_not_import_logging() -> None:
    done = _fresh("""
        log.debug("d %d", 1)
        log.info("i %d", 2)
        print("logging" in sys.modules)
    """)
    assert (done.stdout, done.stderr) == ("False\n", "")


def test_a_warning_without_a_console_is_logging_s_last_resort_line() -> None:
    """As when logging was imported and nothing configured: the bare message on stderr."""
    done = _fresh("""
        log.warning("w %s", "x")
        print("logging" in sys.modules)
    """)
    assert (done.stdout, done.stderr) == ("True\n", "w x\n")


@pytest.mark.parametrize(("level", "printed"), [
    ("DEBUG", "edgeconv: d 1\nedgeconv: i 2\nedgeconv: warning: w 3\n"),
    ("WARNING", "edgeconv: warning: w 3\n"),
    ("ERROR", ""),
])
def test_a_waiting_console_is_installed_by_the_first_line_at_its_level(level: str, printed: str) -> None:
    done = _fresh(f"""
        from edgeconv.console import LineProgress
        _log.console(lambda: LineProgress(sys.stderr).handler(), _log.{level})
        seen = ["logging" in sys.modules]
        log.debug("d %d", 1)
        seen.append("logging" in sys.modules)
        log.info("i %d", 2)
        log.warning("w %d", 3)
        seen.append("logging" in sys.modules)
        print(seen)
    """)
    imported = {"DEBUG": "[False, True, True]", "WARNING": "[False, False, True]", "ERROR": "[False, False, False]"}
    assert (done.stdout, done.stderr) == (imported[level] + "\n", printed)


def test_asking_for_edgeconv_s_logger_installs_the_waiting_console_first() -> None:
    """many.py sets its display's handler on the logger: the console must not come in over it later."""
    done = _fresh("""
        import logging
        from edgeconv.console import LineProgress
        _log.console(lambda: LineProgress(sys.stderr).handler(), _log.WARNING)
        logger = _log.edgeconv_logger()
        logger.handlers = [logging.StreamHandler(sys.stdout)]
        log.warning("w")
        print(logger.propagate, logger.level)
    """)
    assert (done.stdout, done.stderr) == ("w\nFalse 30\n", "")


def test_the_record_names_the_line_that_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = _log.get_logger("edgeconv.probe")
    with caplog.at_level(logging.DEBUG, logger="edgeconv.probe"):
        log.debug("a %s %d", "b", 3)
    (record,) = caplog.records
    assert (record.name, record.levelno, record.getMessage()) == ("edgeconv.probe", logging.DEBUG, "a b 3")
    assert (record.funcName, record.filename) == ("test_the_record_names_the_line_that_logged", "test_log.py")


def test_exc_info_carries_the_exception(caplog: pytest.LogCaptureFixture) -> None:
    log = _log.get_logger("edgeconv.probe")
    with caplog.at_level(logging.DEBUG, logger="edgeconv.probe"):
        try:
            raise ValueError("inner")
        except ValueError:
            log.debug("failed", exc_info=True)
    (record,) = caplog.records
    assert record.exc_info is not None and str(record.exc_info[1]) == "inner"


@pytest.mark.parametrize("installed", [True, False])
def test_kept_restores_the_logger_and_the_waiting_console(installed: bool) -> None:
    logger = logging.getLogger("edgeconv")
    theirs = logging.NullHandler()
    before = (logger.handlers[:], logger.level, logger.propagate)
    logger.handlers, logger.propagate = [theirs], True
    logger.setLevel(logging.INFO)
    try:
        with _log.kept():
            _log.console(logging.NullHandler, _log.DEBUG)  # logging is imported: installed at once
            assert logger.handlers != [theirs] and logger.level == logging.DEBUG and not logger.propagate
            if not installed:
                _log._console = (logging.NullHandler, _log.ERROR)
        assert (logger.handlers, logger.level, logger.propagate, _log._console) == ([theirs], logging.INFO, True, None)
    finally:
        logger.handlers, logger.propagate = before[0], before[2]
        logger.setLevel(before[1])


def test_kept_undoes_a_console_installed_in_a_process_that_had_not_imported_logging() -> None:
    done = _fresh("""
        from edgeconv.console import LineProgress
        with _log.kept():
            _log.console(lambda: LineProgress(sys.stderr).handler(), _log.WARNING)
            log.warning("inside")
        import logging
        logger = logging.getLogger("edgeconv")
        print(logger.handlers, logger.level, logger.propagate, _log._console)
        log.warning("after")
    """)
    assert (done.stdout, done.stderr) == ("[] 0 True None\n", "edgeconv: warning: inside\nafter\n")
