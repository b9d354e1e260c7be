"""PopTorch's ``poptorch.Attribute``: PopART attributes on the ops created inside it.

``Attribute(__outline={"layer": "LayerNorm"})`` is a context manager: PopTorch hands each
``name={key: value}`` to PopART's builder, which writes attribute ``name`` (the keys and
values as one list of strings, by key) on every op created while it is active; an inner
Attribute adds to or replaces the keys of an outer one until it exits. PopART reads
``__outline`` (optimum-graphcore's ``outline_attribute``) when it outlines: only ops whose
attributes match may share code. ipupod's memory plan charges code for every node and does
not outline, so the attribute changes nothing on ipupod; it is carried, not dropped: while a
model is exported, entering an Attribute pushes a tracing scope ``__ipupod_attr_<n>`` (as a
block does, blocks.py), and :func:`annotate` writes the attributes onto every node inside it.
The compiler accepts PopART's attributes (names beginning ``__``) on any op and names them in
the compile report's notes (docs/differences.md). Outside an export it does nothing, so the
model still runs on the CPU.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List

import torch
from ipupod.poptorch._support import ExportRecording

_MARKER = re.compile(r"/__ipupod_attr_(\d+)(?=/)")
Attributes = Dict[str, Dict[str, str]]


class _Recorder:
    """The Attributes entered during one export, in the order their scopes were pushed."""

    def __init__(self) -> None:
        self.scopes: List[Attributes] = []


_recording = ExportRecording(_Recorder)
#: Records the Attributes entered while a model is exported (not reentrant).
recording = _recording.recording


def _checked(attributes: Dict[str, Any]) -> Attributes:
    out: Attributes = {}
    for name, values in attributes.items():
        if not name.startswith("__") or name == "__":
            raise ValueError(f"poptorch.Attribute: '{name}' is not one of PopART's builder "
                             f"attributes, whose names begin with '__' (such as __outline); it "
                             f"would set an attribute of every op inside")
        if not isinstance(values, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise ValueError(f"poptorch.Attribute: {name} must be a dict of strings to strings "
                             f"(PopART's key and value), not {values!r}")
        if name in ("__ipu_number", "__pipeline_stage"):
            raise ValueError(f"poptorch.Attribute: {name} is placement, which ipupod reads "
                             f"from blocks: use poptorch.BeginBlock, Block or Stage")
        out[name] = dict(values)
    return out


class Attribute:
    """A context manager: PopART attributes (``__outline={"layer": "A"}``) on every op
    created inside it. They tune PopART's outlining only, which ipupod does not model: they
    are carried into the exported model and change nothing."""

    def __init__(self, **attributes: Dict[str, str]) -> None:
        self._attributes = _checked(attributes)
        self._pushed: List[bool] = []

    def __enter__(self) -> None:
        # None, as PopTorch's (a forward pre-hook may return what __enter__ does)
        state = torch._C._get_tracing_state()
        pushed = _recording.current is not None and state is not None
        if pushed:
            _recording.current.scopes.append(self._attributes)
            state.push_scope(f"IpupodAttr::__ipupod_attr_{len(_recording.current.scopes) - 1}")
        self._pushed.append(pushed)

    def __exit__(self, *exc_info: Any) -> None:
        if self._pushed and self._pushed.pop():
            state = torch._C._get_tracing_state()
            if state is not None:
                state.pop_scope()


def annotate(model: Any, scopes: List[Attributes]) -> int:
    """Writes the Attributes' values onto every node of an exported ``onnx.ModelProto``
    created inside them (outer first, so an inner key wins); returns the nodes annotated."""
    from onnx import helper
    annotated = 0
    for node in model.graph.node:
        merged: Attributes = {}
        for index in _MARKER.findall(node.name):
            for name, values in scopes[int(index)].items():
                merged.setdefault(name, {}).update(values)
        if not merged:
            continue
        kept = [a for a in node.attribute if a.name not in merged]
        del node.attribute[:]
        node.attribute.extend(kept)
        for name, values in sorted(merged.items()):
            if not values:
                continue
            flat = [s for key in sorted(values) for s in (key, values[key])]
            node.attribute.append(helper.make_attribute(name, flat))
        annotated += 1
    return annotated
