"""The front end's executable cache on the client (``Options.enableExecutableCaching(path)``,
``$POPTORCH_CACHE_DIR``; PopTorch section 4.10.1).

An entry is ``<dir>/<key>.ipx`` (the executable) and ``<dir>/<key>.json`` (what the compile
said: its summary, warnings and time). The key is the SHA-256 of the exported ONNX bytes,
the compile settings (IPUConfig, ``--set`` overrides, training arguments) and the ipupod
version, so the same model wrapped with the same options by the same ipupod finds it again,
in this process or another, and nothing else does. Both files are written to a temporary
name in the directory and renamed into place (the .json last), so a reader sees a whole
entry or none; a concurrent writer of the same key renames an identical file over it.
Nothing is evicted, as in PopTorch: delete old entries yourself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from typing import Any, Callable, Dict, Optional

from ipupod import __version__ as IPUPOD_VERSION
from ipupod.compiling import CompileResult

FORMAT = "ipupod.poptorch.cache/1"


def key(onnx: bytes, ipu_config: Dict[str, Any], sets: Any, extra: Dict[str, Any]) -> str:
    """The entry's name: a SHA-256 over everything that decides the executable."""
    described = json.dumps({"format": FORMAT, "ipupod": IPUPOD_VERSION,
                            "onnx_sha256": hashlib.sha256(onnx).hexdigest(),
                            "ipu_config": ipu_config, "sets": list(sets), "extra": extra},
                           sort_keys=True, default=repr)
    return hashlib.sha256(described.encode("utf-8")).hexdigest()


def _paths(directory: str, name: str) -> tuple:
    return os.path.join(directory, f"{name}.ipx"), os.path.join(directory, f"{name}.json")


def lookup(directory: str, name: str) -> Optional[CompileResult]:
    """The cached compile (``path`` = the .ipx), or None when there is no whole entry."""
    ipx, meta = _paths(directory, name)
    try:
        with open(meta, encoding="utf-8") as file:
            data = json.load(file)
        if data.get("format") != FORMAT or not os.path.isfile(ipx):
            return None
        return CompileResult(sha256=data["sha256"], summary=data["summary"], report={},
                             warnings=list(data["warnings"]),
                             compile_seconds=float(data["compile_seconds"]), path=ipx)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(directory: str, name: str, compile_to: Callable[[str], CompileResult]
          ) -> CompileResult:
    """Compiles with ``compile_to(path)`` (which writes the .ipx there) and puts the result
    in the cache; returns it with ``path`` = the cached .ipx."""
    os.makedirs(directory, exist_ok=True)
    ipx, meta = _paths(directory, name)
    handle, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".ipx", dir=directory)
    os.close(handle)
    try:
        result = compile_to(partial)
        os.replace(partial, ipx)
        _write_atomically(meta, json.dumps({
            "format": FORMAT, "sha256": result.sha256, "summary": result.summary,
            "warnings": result.warnings, "compile_seconds": result.compile_seconds}))
    finally:
        with contextlib.suppress(OSError):
            os.remove(partial)
    result.path = ipx
    return result


def _write_atomically(path: str, text: str) -> None:
    handle, partial = tempfile.mkstemp(prefix=".", suffix=".json",
                                       dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise
