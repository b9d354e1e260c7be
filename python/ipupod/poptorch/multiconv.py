"""PopTorch's ``poptorch.MultiConv``: the convolutions computed inside the context manager
run as one multi-convolution on the IPU.

The convolutions compute what they compute separately (on the CPU and on ipupod alike). What
a multi-convolution changes on the IPU is how PopLibs plans them; ipupod models one option:
``availableMemoryProportions`` becomes each convolution's ``available_memory_proportion``
attribute, which caps its temporary memory in the compiler's memory plan exactly as
``poptorch.set_available_memory`` does (device/compiler/temporaries.h); a proportion already set on
a convolution by ``set_available_memory`` stays. ``partialsTypes``, ``enableConvDithering``,
``planType``, ``perConvReservedTiles`` and ``cycleBackOff`` are checked as PopTorch checks
them and have no effect (docs/differences.md).

While a model is exported, entering a MultiConv pushes a tracing scope named
``__ipupod_multiconv_<n>``, so torch.onnx puts that name into the names of the nodes made
inside; :func:`apply` finds each multi-convolution's Conv nodes by it, in graph order.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ipupod.poptorch._support import ExportRecording, option_error
from ipupod.poptorch.enums import MultiConvPlanType

_MARKER = re.compile(r"/__ipupod_multiconv_(\d+)(?=/)")


class _Recorder:
    """The multi-convolutions entered during one export, in order, and the nesting depth."""

    def __init__(self) -> None:
        self.entered: List["MultiConv"] = []
        self.depth = 0


_recording = ExportRecording(_Recorder)
#: Records the MultiConvs entered while a model is exported (not reentrant).
recording = _recording.recording


def _per_conv(name: str, value: Any, kind: Union[type, tuple]) -> Optional[tuple]:
    """PopTorch's per-convolution option: one value for every convolution, or a non-empty
    list or tuple of them."""
    if value is None:
        return None
    if isinstance(value, kind) and not isinstance(value, bool) or \
            (kind is bool and isinstance(value, bool)):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, kind) and (kind is bool or not isinstance(v, bool)) for v in value):
        return tuple(value)
    raise option_error(f"Invalid {name}! Give one value or a list of one per convolution",
                       f"MultiConv.{name}")


class MultiConv:
    """A context manager: the convolutions inside run as one multi-convolution (see the
    module's docstring). The setters return ``self``, as PopTorch's do."""

    def __init__(self) -> None:
        self.available_memory_proportions: Optional[tuple] = None
        self.partials_types: Optional[tuple] = None
        self.plan_type: Optional[MultiConvPlanType] = None
        self.per_conv_reserved_tiles: Optional[int] = None
        self.cycle_back_off: Optional[float] = None
        self.conv_ditherings: Optional[tuple] = None
        self._pushed: List[bool] = []

    def availableMemoryProportions(self, value: Union[float, Sequence[float]]  # noqa: N802
                                   ) -> "MultiConv":
        """The share (0 to 1) of the IPU's memory each convolution may use for temporaries:
        one value for all, or one per convolution."""
        values = _per_conv("available memory proportion", value, float)
        for v in values or ():
            if not 0.0 <= v <= 1.0:
                raise option_error(f"Invalid available memory proportion {v}: it must be "
                                   f"between 0 and 1", "MultiConv.availableMemoryProportions")
        self.available_memory_proportions = values
        return self

    def partialsTypes(self, value: Any) -> "MultiConv":  # noqa: N802 - PopTorch's name
        """torch.float or torch.half, for all or per convolution (no effect in ipupod)."""
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not values or any(v not in (torch.float, torch.half) for v in values):
            raise option_error("Invalid partials types. Expecting torch.float or torch.half",
                               "MultiConv.partialsTypes")
        self.partials_types = tuple(values)
        return self

    def enableConvDithering(self, value: Union[bool, Sequence[bool]]  # noqa: N802
                            ) -> "MultiConv":
        """Per-convolution dithering (no effect in ipupod)."""
        if value is not None and not isinstance(value, bool) and not (
                isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value)):
            raise option_error("value must be bool or list of bools",
                               "MultiConv.enableConvDithering")
        self.conv_ditherings = _per_conv("conv dithering", value, bool)
        return self

    def planType(self, value: Optional[MultiConvPlanType]) -> "MultiConv":  # noqa: N802
        """``MultiConvPlanType.Parallel`` or ``Serial`` (no effect in ipupod)."""
        if value is not None and not isinstance(value, MultiConvPlanType):
            raise option_error("Invalid plan type! Use poptorch.MultiConvPlanType",
                               "MultiConv.planType")
        self.plan_type = value
        return self

    def perConvReservedTiles(self, value: int) -> "MultiConv":  # noqa: N802
        """Tiles to reserve for each convolution (no effect in ipupod)."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise option_error(f"perConvReservedTiles takes a non-negative int, not {value!r}",
                               "MultiConv.perConvReservedTiles")
        self.per_conv_reserved_tiles = value
        return self

    def cycleBackOff(self, value: float) -> "MultiConv":  # noqa: N802 - PopTorch's name
        """The cycle back-off proportion, between 0 and 1 (no effect in ipupod)."""
        if not isinstance(value, float) or not 0.0 <= value <= 1.0:
            raise option_error(f"cycleBackOff takes a float between 0 and 1, not {value!r}",
                               "MultiConv.cycleBackOff")
        self.cycle_back_off = value
        return self

    def __enter__(self) -> "MultiConv":
        state = torch._C._get_tracing_state()
        if _recording.current is None or state is None:
            self._pushed.append(False)
            return self
        if _recording.current.depth > 0:
            raise option_error("Nested poptorch.MultiConv is not supported", "MultiConv")
        _recording.current.entered.append(self)
        _recording.current.depth += 1
        state.push_scope(f"IpupodMultiConv::__ipupod_multiconv_{len(_recording.current.entered) - 1}")
        self._pushed.append(True)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self._pushed.pop():
            return
        state = torch._C._get_tracing_state()
        if state is not None:
            state.pop_scope()
        if _recording.current is not None:
            _recording.current.depth -= 1


def apply(model: Any, recorder: _Recorder) -> None:
    """Puts each multi-convolution's proportions on its Conv nodes (see the module's
    docstring); ``poptorch.Error`` (INVALID_ARGUMENT) for a MultiConv without convolutions
    or with per-convolution options of another count."""
    convs: Dict[int, List[Any]] = {i: [] for i in range(len(recorder.entered))}
    for node in model.graph.node:
        markers = _MARKER.findall(node.name)
        if markers and node.op_type == "Conv" and node.domain in ("", "ai.onnx"):
            convs[int(markers[-1])].append(node)
    for index, multiconv in enumerate(recorder.entered):
        nodes = convs[index]
        if not nodes:
            raise option_error("Unexpected end_multi_conv: no convolution ran inside this "
                               "poptorch.MultiConv", "MultiConv")
        for name, values in (("available memory proportions",
                              multiconv.available_memory_proportions),
                             ("partials types", multiconv.partials_types),
                             ("conv ditherings", multiconv.conv_ditherings)):
            if values is not None and len(values) not in (1, len(nodes)):
                raise option_error(f"MultiConv has {len(nodes)} convolutions but {len(values)} "
                                   f"{name}: give one for all or one per convolution",
                                   "MultiConv")
        _set_proportions(nodes, multiconv.available_memory_proportions)


def _set_proportions(nodes: List[Any], proportions: Optional[tuple]) -> None:
    from onnx import helper
    if proportions is None:
        return
    for k, node in enumerate(nodes):
        if any(a.name == "available_memory_proportion" for a in node.attribute):
            continue  # set_available_memory on this convolution wins
        value = proportions[0] if len(proportions) == 1 else proportions[k]
        node.attribute.append(helper.make_attribute("available_memory_proportion",
                                                    float(value)))
