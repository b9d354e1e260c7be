"""What every part of ``ipupod.poptorch`` shares: the ``poptorch`` logger and its levels
(``poptorch.setLogLevel``, ``$POPTORCH_LOG_LEVEL``), the warning category compile warnings
are issued in, the errors of options ipupod refuses, and whether a model is being traced for
the IPU (``poptorch.isRunningOnIpu``, which export sets and the annotations read).

The logger is ``logging.getLogger("poptorch")``; it prints to stderr through its own handler
(as PopTorch's does) and propagates, so ``logging`` configuration and pytest's ``caplog``
see it too. The front end logs compiles, cache hits, attaches and implicit weight copies at
INFO and DEBUG.
"""

from __future__ import annotations

import logging
import os
import contextlib
import sys
import warnings
from typing import Callable, Generic, Iterator, Optional, TypeVar, Union

import grpc

from ipupod.errors import Error

R = TypeVar("R")

logger = logging.getLogger("poptorch")
_on_ipu = False
#: Frames of files under this directory are the library's, not the user's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

#: PopTorch's level names (section 4.11.1) and what they are in ``logging``; TRACE and
#: TRACE_ALL are DEBUG here (the front end has nothing finer to say).
LEVELS = {
    "TRACE": logging.DEBUG,
    "TRACE_ALL": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "OFF": logging.CRITICAL + 10,
}
#: PopTorch's legacy integer levels.
_INT_LEVELS = {0: "TRACE", 1: "DEBUG", 2: "INFO", 3: "WARN", 4: "ERR", 6: "OFF"}
#: Without $POPTORCH_LOG_LEVEL, as PopTorch's Python logger: warnings and errors.
DEFAULT_LEVEL = "WARN"


class PoptorchWarning(UserWarning):
    """A warning of ``ipupod.poptorch``: a compile warning of the server (an IPUConfig key
    that does not apply, a seed ipupod chose, ...) or an option accepted without effect."""


class OptionError(Error, ValueError):
    """``poptorch.Error`` for an option ipupod refuses or a bad option value; also a
    ``ValueError``, as PopTorch's Python checks raise."""


def option_error(message: str, where: str, *, not_modelled: bool = False) -> OptionError:
    return OptionError(message, code=grpc.StatusCode.UNIMPLEMENTED if not_modelled
                       else grpc.StatusCode.INVALID_ARGUMENT,
                       type="client.not_modelled" if not_modelled else "client.options",
                       location=where)


class NotModelledError(Error, AttributeError):
    """``poptorch.Error`` for a PopTorch name ipupod does not provide (``poptorch.for_loop``,
    ``Options.anchorTensor``, ``PoplarExecutor.rng_state``): says why and what to use
    instead. Also an ``AttributeError``, so ``hasattr`` and ``getattr(..., default)`` answer
    as for any missing name."""


def not_modelled(name: str, why: str, owner: str = "poptorch") -> NotModelledError:
    """The error for ``<owner>.<name>``: why, and what to use instead."""
    return NotModelledError(f"{owner}.{name} is not available in ipupod.poptorch: {why} "
                            f"(docs/differences.md, \"PopTorch front end\")",
                            code=grpc.StatusCode.UNIMPLEMENTED, type="client.not_modelled",
                            location=f"{owner}.{name}")


def warn(message: str) -> None:
    """A :class:`PoptorchWarning`, attributed to the first caller outside the ipupod package
    (the user's line that wrapped, compiled or configured the model)."""
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    logger.debug("warning: %s", message)
    warnings.warn(message, PoptorchWarning, stacklevel=level)


def level_of(level: Union[str, int]) -> int:
    """The ``logging`` level of a PopTorch level name or integer."""
    if isinstance(level, int) and not isinstance(level, bool) and level in _INT_LEVELS:
        return LEVELS[_INT_LEVELS[level]]
    if isinstance(level, str) and level.strip().upper() in LEVELS:
        return LEVELS[level.strip().upper()]
    raise option_error(f"unknown log level {level!r}; use one of OFF, ERR, WARN, INFO, DEBUG, "
                       f"TRACE, TRACE_ALL (or 0-4, 6)", "poptorch.setLogLevel")


def setLogLevel(level: Union[str, int]) -> None:  # noqa: N802 - PopTorch's name
    """How much the ``poptorch`` logger prints: ``"OFF"``, ``"ERR"``, ``"WARN"`` (the
    default), ``"INFO"``, ``"DEBUG"``, ``"TRACE"``, ``"TRACE_ALL"``, or PopTorch's integers
    (0 TRACE ... 4 ERR, 6 OFF)."""
    logger.setLevel(level_of(level))


def _install() -> None:
    if not any(getattr(h, "_ipupod_poptorch", False) for h in logger.handlers):
        console = logging.StreamHandler()
        console.setFormatter(logging.Formatter(
            "[%(asctime)s] [poptorch] [%(levelname)s] %(message)s", "%H:%M:%S"))
        console._ipupod_poptorch = True  # type: ignore[attr-defined]
        logger.addHandler(console)
    requested = os.environ.get("POPTORCH_LOG_LEVEL", "")
    try:
        setLogLevel(int(requested) if requested.strip().isdigit() else
                    (requested or DEFAULT_LEVEL))
    except OptionError as error:
        setLogLevel(DEFAULT_LEVEL)
        warnings.warn(f"$POPTORCH_LOG_LEVEL: {error.message}; logging at {DEFAULT_LEVEL}",
                      PoptorchWarning, stacklevel=2)


def isRunningOnIpu() -> bool:  # noqa: N802 - PopTorch's name
    """True while the model is traced for the IPU (exported), False on the CPU."""
    return _on_ipu


@contextlib.contextmanager
def running_on_ipu() -> Iterator[None]:
    """:func:`isRunningOnIpu` is True inside: export traces the model in it."""
    global _on_ipu
    _on_ipu = True
    try:
        yield
    finally:
        _on_ipu = False


class ExportRecording(Generic[R]):
    """What one export records (blocks, attribute scopes, multi-convolutions, custom ops):
    ``current`` is the recorder while a model is exported, None otherwise. The export
    enters ``recording()`` (not reentrant); the annotations read ``current``."""

    def __init__(self, make: Callable[[], R]) -> None:
        self._make = make
        self.current: Optional[R] = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[R]:
        """A fresh recorder for the duration of one export."""
        self.current = self._make()
        try:
            yield self.current
        finally:
            self.current = None


_install()
