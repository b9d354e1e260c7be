"""Compiling on the server (CompileService, proto/ipupod/v1/compile.proto) and the usage
ledger (AccountingService, proto/ipupod/v1/accounting.proto).

:meth:`CompileMixin.compile` sends an ONNX model once, as a blob by its SHA-256 (the jobs'
blob upload: StatBlob, PutBlob only when the server lacks the bytes), then asks the server to
compile it with an IPUConfig and training options, as ``ipupod compile`` does on this machine.
The executable stays in the server's cache for the caller, so ``Session.load(result)`` (or its
``sha256``) loads it without uploading anything; with ``output=`` the ``.ipx`` comes back too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import grpc

from ipupod import errors
from ipupod._proto import accounting_pb2, compile_pb2
from ipupod.calls import Calls, Time, unix_ms
from ipupod.sources import BlobSource

#: What ``Client.compile`` takes as the model: a path, the bytes, or an ``onnx.ModelProto``.
Model = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]
#: The optimizers the compiler knows (``ipupod compile --optimizer``).
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "lamb")
_LOCATION = "Client.compile"


@dataclasses.dataclass
class CompileResult:
    """What the server compiled: the executable's ``sha256`` (``Session.load`` takes this
    object or the hash), the summary ``ipupod compile --json`` prints (a dict: run shape,
    placement, memory, ...), the report (a dict, with ``report=True``, else empty), the
    compiler's warnings and the server's wall time. ``path`` is where ``output=`` wrote the
    .ipx (else None)."""

    sha256: str
    summary: Dict[str, Any]
    report: Dict[str, Any]
    warnings: List[str]
    compile_seconds: float
    path: Optional[str] = None


def _model_bytes(model: Model) -> Union[str, bytes, memoryview]:
    """A path or bytes for the blob upload; an ``onnx.ModelProto`` is serialized."""
    if hasattr(model, "SerializeToString") and not isinstance(model, (bytes, bytearray)):
        return model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return memoryview(model).cast("B")
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise errors.local_error(f"model must be an ONNX file path, its bytes or an "
                             f"onnx.ModelProto, not {type(model).__name__}",
                             grpc.StatusCode.INVALID_ARGUMENT, _LOCATION)


def _config_json(ipu_config: Union[None, str, "os.PathLike[str]", Mapping[str, Any]]) -> str:
    """An IPUConfig as JSON text: a dict, a JSON string, or a path to ipu_config.json."""
    if ipu_config is None:
        return ""
    if isinstance(ipu_config, Mapping):
        return json.dumps(dict(ipu_config))
    text = os.fspath(ipu_config)
    if text.lstrip().startswith("{"):
        return text
    try:
        with open(text, encoding="utf-8") as file:
            return file.read()
    except OSError as error:
        raise errors.local_error(f"cannot read the IPUConfig '{text}': {error.strerror}; pass "
                                 f"a dict, JSON text or an ipu_config.json path",
                                 grpc.StatusCode.NOT_FOUND, _LOCATION) from None


def _attrs(optimizer_attrs: Optional[Mapping[str, Union[float, bool]]]) -> Dict[str, float]:
    out = {}
    for name, value in (optimizer_attrs or {}).items():
        if not isinstance(value, (int, float)):
            raise errors.local_error(f"optimizer attribute '{name}' is {value!r}; attributes "
                                     f"are numbers or booleans", grpc.StatusCode.INVALID_ARGUMENT,
                                     _LOCATION)
        out[name] = float(value)
    return out


def _param_groups(groups: Sequence[Mapping[str, Any]]) -> List[compile_pb2.ParamGroup]:
    """torch-shaped param groups, ``{"params": [names], "weight_decay": 0.0, ...}``."""
    out = []
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping) or "params" not in group:
            raise errors.local_error(f"param_groups[{index}] is {group!r}; each is a dict with "
                                     f"'params' (weight names) and attributes, e.g. "
                                     f"{{'params': ['fc.bias'], 'weight_decay': 0.0}}",
                                     grpc.StatusCode.INVALID_ARGUMENT, _LOCATION)
        names = group["params"]
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise errors.local_error(f"param_groups[{index}]['params'] must be a list of weight "
                                     f"names, not {names!r}", grpc.StatusCode.INVALID_ARGUMENT,
                                     _LOCATION)
        attrs = _attrs({k: v for k, v in group.items() if k != "params"})
        out.append(compile_pb2.ParamGroup(weights=list(names), attrs=attrs))
    return out


def _check_training(train: bool, loss: str, optimizer: str, optimizer_attrs: Mapping[str, float],
                    frozen: Sequence[str], buffers: Mapping[str, str],
                    param_groups: Sequence[Any] = ()) -> None:
    if optimizer and optimizer not in OPTIMIZERS:
        raise errors.local_error(f"unknown optimizer '{optimizer}'; use one of "
                                 f"{', '.join(OPTIMIZERS)}", grpc.StatusCode.INVALID_ARGUMENT,
                                 _LOCATION)
    if not train and (loss or optimizer or optimizer_attrs or frozen or param_groups):
        raise errors.local_error("loss, optimizer, optimizer_attrs, param_groups and frozen are "
                                 "training options: pass train=True too",
                                 grpc.StatusCode.INVALID_ARGUMENT, _LOCATION)


class CompileMixin:
    """CompileService and AccountingService calls of :class:`ipupod.Client`, made through
    the client's :class:`ipupod.calls.Calls`."""

    _calls: Calls

    def compile(self, model: Model,
                ipu_config: Union[None, str, "os.PathLike[str]", Mapping[str, Any]] = None, *,
                set: Sequence[str] = (),  # noqa: A002 - the CLI's --set
                module_map: Optional[Mapping[str, int]] = None, train: bool = False,
                loss: str = "", optimizer: str = "",
                optimizer_attrs: Optional[Mapping[str, Union[float, bool]]] = None,
                frozen: Sequence[str] = (), buffers: Optional[Mapping[str, str]] = None,
                param_groups: Sequence[Mapping[str, Any]] = (), report: bool = False,
                output: Union[None, str, "os.PathLike[str]"] = None) -> CompileResult:
        """Compiles an ONNX model on the server, as ``ipupod compile`` does locally.

        Args:
            model: the ONNX model: a path, its bytes or an ``onnx.ModelProto``. Uploaded as a
                blob unless the server already holds those bytes.
            ipu_config: optimum-graphcore's IPUConfig: a dict, JSON text or a file path.
            set: ``IPUConfig.update_from_string`` overrides, applied in order
                (``"inference_device_iterations=4"``).
            module_map: ``{"module.path": ipu}`` placement (``--module-map``).
            train: a training executable; then ``loss`` (the scalar output, "" = the only
                one), ``optimizer`` (sgd|adam|adamw|rmsprop|lamb, "" = sgd),
                ``optimizer_attrs`` (variables: ``{"lr": 0.01, "momentum": 0.9}``; booleans
                as True/False), ``frozen`` (initializers not to train), ``buffers``
                (initializer -> the value replacing it every micro-batch) and
                ``param_groups``, torch-shaped: ``[{"params": ["fc.bias", "ln.weight"],
                "weight_decay": 0.0}]`` gives those weights attributes of their own, each a
                variable of group i that ``session.set_optimizer`` names ``group/<i>/<attr>``
                (``ipupod compile --opt-group``).
            report: include the memory and time report.
            output: write the .ipx there too (it also stays in the server's cache).

        Returns a :class:`CompileResult`. Raises ``ipupod.Error``: INVALID_ARGUMENT when the
        model does not compile with this config (the compiler's message), RESOURCE_EXHAUSTED
        when the server's compile limits are reached (retry later).
        """
        attrs = _attrs(optimizer_attrs)
        groups = _param_groups(param_groups)
        _check_training(train, loss, optimizer, attrs, frozen, buffers or {}, groups)
        source = BlobSource(_model_bytes(model), "model", _LOCATION)
        self._calls.put_blob(source)
        request = compile_pb2.CompileRequest(
            model_sha256=source.sha256, ipu_config_json=_config_json(ipu_config), set=list(set),
            module_map_json=json.dumps(dict(module_map)) if module_map else "", train=train,
            loss=loss, optimizer=optimizer, optimizer_attrs=attrs, frozen=list(frozen),
            buffers=dict(buffers or {}), param_groups=groups,
            return_executable=output is not None, report=report)
        responses = self._calls.stream_out(self._calls.compiler.Compile, request,
                                           "CompileService.Compile")
        return _receive(responses, output, f"CompileService.Compile at {self._calls.server}")

    def usage(self, group_by: str = "user", since: Time = None, until: Time = None,
              user: str = "") -> accounting_pb2.GetUsageResponse:
        """IPU time from the server's ledger (``ipupod usage``): grouped by ``"user"``,
        ``"account"``, ``"qos"`` or ``"day"`` (UTC) over [since, until) (datetimes or Unix
        seconds; None = the ledger's beginning / now); ``user`` "" = yours (admins: all)."""
        location = "Client.usage"
        request = accounting_pb2.GetUsageRequest(
            group_by=group_by, since_unix_ms=unix_ms(since, "since", location),
            until_unix_ms=unix_ms(until, "until", location), user=user)
        return self._calls.unary(self._calls.accounting.GetUsage, request,
                                 "AccountingService.GetUsage")

    def history(self, user: str = "", state: str = "", since: Time = None, until: Time = None,
                limit: int = 0) -> accounting_pb2.ListHistoryResponse:
        """Session and job records, newest first (``ipupod history``): ``records``, and
        ``truncated`` when more than ``limit`` (0 = 100) matched."""
        location = "Client.history"
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 10000:
            raise errors.local_error(f"limit must be 0..10000, not {limit!r}",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)
        request = accounting_pb2.ListHistoryRequest(
            user=user, state=state, since_unix_ms=unix_ms(since, "since", location),
            until_unix_ms=unix_ms(until, "until", location), limit=limit)
        return self._calls.unary(self._calls.accounting.ListHistory, request,
                                 "AccountingService.ListHistory")


def _receive(responses: Any, output: Union[None, str, "os.PathLike[str]"],
             location: str) -> CompileResult:
    """The first response's result, then the .ipx chunks written to ``output``. A compile
    that ran out of IPU memory sends its memory plan before its error: the raised
    ``ipupod.Error`` then carries it as ``report`` (a dict, the report's JSON)."""
    first = next(iter(responses), None)
    if first is not None and first.WhichOneof("kind") == "failure_report_json":
        report = json.loads(first.failure_report_json)
        try:
            first = next(responses, None)  # the error the server ends the call with
        except errors.Error as error:
            error.report = report
            raise
    if first is None or first.WhichOneof("kind") != "result":
        raise errors.malformed_stream("compile", "the stream did not start with its result",
                                      location)
    result = _result_of(first.result)
    if output is None:
        responses.close()  # cancels the call: nothing more was asked for
        return result
    path = os.fspath(output)
    partial = path + ".part"
    try:
        with open(partial, "wb") as file:
            for response in responses:
                file.write(response.executable_data)
        os.replace(partial, path)  # the .ipx appears whole or not at all
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise
    result.path = path
    return result


def _result_of(message: compile_pb2.CompileResult) -> CompileResult:
    return CompileResult(
        sha256=message.executable.sha256,
        summary=json.loads(message.summary_json) if message.summary_json else {},
        report=json.loads(message.report_json) if message.report_json else {},
        warnings=list(message.warnings), compile_seconds=message.compile_seconds)
