"""PopTorch's ops that a model carries through ONNX (PopTorch user guide 4.6):
``ipu_print_tensor``, ``nop``, ``dynamic_slice``, ``dynamic_update`` and
``ctc_beam_search_decoder``.

On the CPU each computes its result with torch (the decoder in Python, as the server does it).
Exported by ``inferenceModel`` or ``trainingModel``, each becomes one node in domain
``ai.graphcore``, as PopART names them (``IpuPrint``, ``Nop``, ``DynamicSlice``,
``DynamicUpdate``, ``CtcBeamSearchDecoder``), which ipupod's compiler runs
(device/graph/ops_poptorch.cc) and differentiates (device/training/grad_tensor.cc; the decoder has no
gradient, as in PopTorch).

A runtime ``start`` out of range (negative, or the slice running past the dimension) is
refused, on the CPU with ``ValueError`` and on the IPU with ``poptorch.Error``
(INVALID_ARGUMENT) naming the start and the range allowed, rather than clamped:
PopTorch's documentation does not say what happens then (docs/differences.md).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

import torch

from ipupod.errors import Error

DOMAIN = "ai.graphcore"
_INT64 = 7  # onnx.TensorProto.INT64
_INT32 = 6  # onnx.TensorProto.INT32


def _require_tensor(value: Any, what: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, not {type(value).__name__}")


def _require_int(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")


def _start_value(start: torch.Tensor) -> int:
    if start.numel() != 1:
        raise ValueError(f"start must hold one element, not {list(start.shape)}")
    return int(start.reshape(-1)[0])


def _check_range(x: torch.Tensor, dim: int, start: int, span: int) -> None:
    last = x.shape[dim] - span
    if start < 0 or start > last:
        raise ValueError(f"start {start} on dim {dim} is out of range: a slice spanning "
                         f"{span} of a dim of {x.shape[dim]} starts in [0, {last}]")


def _index_input(g: Any, start: Any) -> Any:
    shape = g.op("Constant", value_t=torch.tensor([1], dtype=torch.int64))
    return g.op("Reshape", g.op("Cast", start, to_i=_INT64), shape)


class _IpuPrint(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, title: str) -> torch.Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        return grad, None

    @staticmethod
    def symbolic(g: Any, x: Any, title: str) -> Any:
        out = g.op(f"{DOMAIN}::IpuPrint", x, title_s=title, print_gradient_i=1)
        out.setType(x.type())
        return out


class _Nop(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        return grad

    @staticmethod
    def symbolic(g: Any, x: Any) -> Any:
        out = g.op(f"{DOMAIN}::Nop", x)
        out.setType(x.type())
        return out


class _DynamicSlice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, start: torch.Tensor, size: int,  # type: ignore[override]
                step: int) -> torch.Tensor:
        span = (size - 1) * step + 1
        first = _start_value(start)
        _check_range(x, dim, first, span)
        ctx.save_for_backward(start)
        ctx.geometry = (x.shape, dim, first, span, step)
        return x.narrow(dim, first, span)[(slice(None),) * dim + (slice(None, None, step),)].clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        shape, dim, first, span, step = ctx.geometry
        dx = grad.new_zeros(shape)
        dx.narrow(dim, first, span)[(slice(None),) * dim + (slice(None, None, step),)] = grad
        return dx, None, None, None, None

    @staticmethod
    def symbolic(g: Any, x: Any, dim: int, start: Any, size: int, step: int) -> Any:
        span = (size - 1) * step + 1
        out = g.op(f"{DOMAIN}::DynamicSlice", x, _index_input(g, start), axes_i=[dim],
                   sizes_i=[span], noOverlap_i=0)
        sizes = x.type().sizes()
        if sizes is not None:
            sizes = list(sizes)
            sizes[dim] = span
            out.setType(x.type().with_sizes(sizes))
        if step == 1:
            return out

        def const(v: int) -> Any:
            return g.op("Constant", value_t=torch.tensor([v], dtype=torch.int64))
        return g.op("Slice", out, const(0), const(span), const(dim), const(step))


class _DynamicUpdate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, src: torch.Tensor, dim: int,  # type: ignore[override]
                start: torch.Tensor, size: int) -> torch.Tensor:
        first = _start_value(start)
        _check_range(x, dim, first, size)
        if src.shape[dim] != size or src.dim() != x.dim():
            raise ValueError(f"src is {list(src.shape)} but the slice it replaces has size "
                             f"{size} on dim {dim} of {list(x.shape)}")
        ctx.geometry = (dim, first, size)
        out = x.clone()
        out.narrow(dim, first, size).copy_(src)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        dim, first, size = ctx.geometry
        dx = grad.clone()
        dx.narrow(dim, first, size).zero_()
        return dx, grad.narrow(dim, first, size).clone(), None, None, None

    @staticmethod
    def symbolic(g: Any, x: Any, src: Any, dim: int, start: Any, size: int) -> Any:
        out = g.op(f"{DOMAIN}::DynamicUpdate", x, _index_input(g, start), src, axes_i=[dim],
                   sizes_i=[size], noOverlap_i=0)
        out.setType(x.type())
        return out


def _log_add(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    hi = max(a, b)
    return hi + math.log1p(math.exp(min(a, b) - hi))


def _ctc_decode(steps: List[List[float]], blank: int, beam_width: int, top_paths: int
                ) -> List[Tuple[Tuple[int, ...], float]]:
    """CTC prefix beam search over one sequence's log probabilities (device/kernels/ctc.h): the
    ``top_paths`` best labellings with their log probabilities, best first, ties to the
    smaller labelling."""
    beams: Dict[Tuple[int, ...], List[float]] = {(): [0.0, -math.inf]}  # [blank, label]
    for step in steps:
        extended: Dict[Tuple[int, ...], List[float]] = {}
        for prefix, (p_blank, p_label) in beams.items():
            total = _log_add(p_blank, p_label)
            same = extended.setdefault(prefix, [-math.inf, -math.inf])
            same[0] = _log_add(same[0], total + step[blank])
            for c, p in enumerate(step):
                if c == blank:
                    continue
                longer = extended.setdefault(prefix + (c,), [-math.inf, -math.inf])
                if prefix and prefix[-1] == c:
                    same[1] = _log_add(same[1], p_label + p)
                    longer[1] = _log_add(longer[1], p_blank + p)
                else:
                    longer[1] = _log_add(longer[1], total + p)
        beams = dict(_best(extended, beam_width))
    return [(prefix, _log_add(*probs)) for prefix, probs in _best(beams, top_paths)]


def _best(beams: Dict[Tuple[int, ...], List[float]], keep: int
          ) -> List[Tuple[Tuple[int, ...], List[float]]]:
    return sorted(beams.items(), key=lambda kv: (-_log_add(*kv[1]), kv[0]))[:keep]


class _CtcBeamSearch(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, probs: torch.Tensor, lengths: torch.Tensor, blank: int,  # type: ignore[override]
                beam_width: int, top_paths: int) -> Tuple[torch.Tensor, ...]:
        time, batch, _ = probs.shape
        label_probs = torch.full((batch, top_paths), -math.inf, dtype=probs.dtype)
        label_lengths = torch.zeros((batch, top_paths), dtype=torch.int32)
        decoded = torch.zeros((batch, top_paths, time), dtype=torch.int32)
        values = probs.detach().double()
        for b in range(batch):
            length = int(lengths[b])
            if not 0 <= length <= time:
                raise ValueError(f"length {length} of sequence {b} is outside [0, {time}] (the "
                                 f"input_length of probs)")
            steps = values[:length, b].tolist()
            for p, (path, log_prob) in enumerate(_ctc_decode(steps, blank, beam_width,
                                                             top_paths)):
                label_probs[b, p] = log_prob
                label_lengths[b, p] = len(path)
                decoded[b, p, :len(path)] = torch.tensor(path, dtype=torch.int32)
        ctx.mark_non_differentiable(label_probs, label_lengths, decoded)
        return label_probs, label_lengths, decoded

    @staticmethod
    def symbolic(g: Any, probs: Any, lengths: Any, blank: int, beam_width: int,
                 top_paths: int) -> Any:
        outs = g.op(f"{DOMAIN}::CtcBeamSearchDecoder", probs, g.op("Cast", lengths, to_i=_INT32),
                    blank_i=blank, beam_width_i=beam_width, top_paths_i=top_paths, outputs=3)
        sizes = probs.type().sizes()
        if sizes is not None:
            time, batch = sizes[0], sizes[1]
            outs[0].setType(probs.type().with_sizes([batch, top_paths]))
            ints = probs.type().with_dtype(torch.int32)
            outs[1].setType(ints.with_sizes([batch, top_paths]))
            outs[2].setType(ints.with_sizes([batch, top_paths, time]))
        return tuple(outs)


def ctc_beam_search_decoder(probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0,
                            beam_width: int = 100, top_paths: int = 1
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PopTorch's CTC beam search decoder: ``probs`` are log probabilities
    ``[input_length, batch_size, num_classes]`` and ``lengths`` ``[batch_size]`` the steps
    of each sequence. Returns the ``top_paths`` most probable labellings of each sequence:
    their log probabilities ``[batch_size, top_paths]`` (float), their lengths
    ``[batch_size, top_paths]`` and the labels ``[batch_size, top_paths, input_length]``
    (int32, 0 after each labelling's end). Inference only: it has no gradient."""
    if not isinstance(probs, torch.Tensor):
        raise _poptorch_error(f"ctc_beam_search_decoder: probs must be a torch.tensor "
                              f"argument. {type(probs)} is not supported.")
    if not isinstance(lengths, torch.Tensor):
        raise _poptorch_error(f"ctc_beam_search_decoder: lengths must be a torch.tensor "
                              f"argument. {type(lengths)} is not supported.")
    for name, value in (("blank", blank), ("beam_width", beam_width), ("top_paths", top_paths)):
        _require_int(value, name)
    if probs.dim() != 3 or not probs.is_floating_point():
        raise ValueError(f"probs must be float [input_length, batch_size, num_classes], not "
                         f"{probs.dtype} {list(probs.shape)}")
    if lengths.shape != (probs.shape[1],) or lengths.is_floating_point():
        raise ValueError(f"lengths must be integers [batch_size] = [{probs.shape[1]}], not "
                         f"{lengths.dtype} {list(lengths.shape)}")
    if not 0 <= blank < probs.shape[2]:
        raise ValueError(f"blank class {blank} is not one of the {probs.shape[2]} classes")
    if beam_width < 1 or not 1 <= top_paths <= beam_width:
        raise ValueError(f"beam_width ({beam_width}) and top_paths ({top_paths}) must be at "
                         f"least 1, with top_paths <= beam_width")
    return _CtcBeamSearch.apply(probs, lengths, blank, beam_width, top_paths)


def _poptorch_error(message: str) -> Exception:
    """``poptorch.Error`` as PopTorch raises it for a bad argument of one of its ops."""
    return Error(message, type="client.application", location="ctc_beam_search_decoder")


def ipu_print_tensor(tensor: torch.Tensor, title: str = "") -> torch.Tensor:
    """Returns ``tensor``; on the IPU each run also prints its value (and, training, its
    gradient as ``<title>_gradient``) to the run's log: the server's log, the output of
    the run, and a batch job's events. Use the result, or the print is optimised away."""
    _require_tensor(tensor, "ipu_print_tensor's tensor")
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, not {type(title).__name__}")
    return _IpuPrint.apply(tensor, title)


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """An identity the compiler keeps (for debugging)."""
    _require_tensor(tensor, "nop's tensor")
    return _Nop.apply(tensor)


def _dim(tensor: torch.Tensor, dim: int) -> int:
    _require_int(dim, "dim")
    if not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(f"dim {dim} is out of range for a tensor of {tensor.dim()} dims")
    return dim % tensor.dim()


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int,
                  step: int) -> torch.Tensor:
    """``size`` elements of ``tensor`` along ``dim`` from the runtime index ``start`` (a
    one-element tensor), every ``step``-th: ``tensor[..., start:start+(size-1)*step+1:step]``.
    ``size`` and ``step`` are constants."""
    _require_tensor(tensor, "dynamic_slice's tensor")
    _require_tensor(start, "dynamic_slice's start")
    _require_int(size, "size")
    _require_int(step, "step")
    if size < 1 or step < 1:
        raise ValueError(f"size ({size}) and step ({step}) must be at least 1")
    return _DynamicSlice.apply(tensor, _dim(tensor, dim), start, size, step)


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                   size: int) -> torch.Tensor:
    """``input`` with ``size`` elements along ``dim`` from the runtime index ``start``
    replaced by ``src`` (whose ``dim`` is ``size`` long)."""
    _require_tensor(input, "dynamic_update's input")
    _require_tensor(src, "dynamic_update's src")
    _require_tensor(start, "dynamic_update's start")
    _require_int(size, "size")
    if size < 1:
        raise ValueError(f"size ({size}) must be at least 1")
    return _DynamicUpdate.apply(input, src, _dim(input, dim), start, size)
