"""``poptorch.optim``: PopTorch's optimizers (SGD, Adam, AdamW, RMSprop, LAMB) with their
constant and variable attributes, and the mapping of any supported optimizer (these, or
``torch.optim``'s SGD, Adam, AdamW and RMSprop) to ipupod's compiler.

ipupod's compiler takes an optimizer name and attributes; the attributes it is given are
variables (changeable between runs with ``setOptimizer``), the others are constants at the
compiler's defaults (which are torch's). So :func:`describe` sends every variable and every
constant whose value is not the default, and :class:`OptimizerSpec` remembers which are
constant, to refuse a later change as PopTorch does.

Several param groups (``optimizer.param_groups``) become the compiler's param groups, one per
torch group and in the same order, each naming its parameters (by the model's parameter names)
and sending ``lr``, its variables and every attribute whose value differs from the first
group's; the optimizer-wide attributes are the first group's. ``setOptimizer`` then sets
``param_groups[i][k]`` as the compiler's ``group/<i>/<k>``. What PopTorch takes once per
optimizer (``loss_scaling``, the accumulator types; here also the flags ``nesterov``,
``amsgrad``, ``centered``, ``bias_correction``) must be equal in every group.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

import torch

# The compiler's attribute names and defaults (device/training/optimizer.cc), per optimizer.
_COMPILER_DEFAULTS: Dict[str, Dict[str, float]] = {
    "sgd": {"lr": 0.01, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0,
            "nesterov": 0.0},
    "adam": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
             "amsgrad": 0.0},
    "adamw": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2,
              "amsgrad": 0.0},
    "rmsprop": {"lr": 0.01, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0, "momentum": 0.0,
                "centered": 0.0},
    "lamb": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2,
             "bias_correction": 1.0, "max_weight_norm": math.inf},
}
# float16 state (seed 003, 4.5.2-4.5.3): the types as bits (32 or 16), SGD's velocity scale.
_STATE_TYPES = ("accum_type", "first_order_momentum_accum_type",
                "second_order_momentum_accum_type")
for _name, _defaults in _COMPILER_DEFAULTS.items():
    _defaults["loss_scaling"] = 1.0  # every optimizer's (seed 003, 4.5.1)
    if _name == "sgd":
        _defaults["velocity_scaling"] = 1.0
    else:
        _defaults.update({t: 32.0 for t in _STATE_TYPES})
# Flags change the optimizer state's layout or types: always constants.
_FLAGS = {"nesterov", "amsgrad", "centered", "bias_correction", *_STATE_TYPES}
# One value for every param group: the flags, and PopTorch's float16 attributes other than
# velocity_scaling (seed 003, 4.5), of which the compiler models loss_scaling.
_SHARED = _FLAGS | {"loss_scaling"}
# PopTorch's attributes for float16 numerics: loss_scaling, velocity_scaling and the state
# types are the compiler's attributes; use_combined_accum and max_grad_norm are accepted and
# not modelled (see docs).
_FP16_ATTRIBUTES = {"loss_scaling": 1.0, "velocity_scaling": 1.0, "use_combined_accum": None,
                    "accum_type": None, "first_order_momentum_accum_type": None,
                    "second_order_momentum_accum_type": None, "max_grad_norm": math.inf}
# torch's names with a switch that ipupod does not model.
_UNSUPPORTED = {"maximize": False, "capturable": False, "differentiable": False}


class VariableAttributes:
    """Which optimizer attributes are variables (PopTorch's ``optimizer.variable_attrs``)."""

    def __init__(self, variables: Iterable[str], names: Iterable[str]) -> None:
        self._names = set(names)
        self._variables = set(variables) | {"lr"}

    def _check(self, name: str) -> None:
        if name not in self._names:
            raise ValueError(f"'{name}' is not an attribute of this optimizer; it has "
                             f"{', '.join(sorted(self._names))}")

    def markAsConstant(self, name: str) -> None:
        """``name`` is fixed at compile time (``lr`` cannot be)."""
        self._check(name)
        if name == "lr":
            raise ValueError("lr is always a variable")
        self._variables.discard(name)

    def markAsVariable(self, name: str) -> None:
        """``name`` may change with ``setOptimizer`` after compiling."""
        self._check(name)
        self._variables.add(name)

    def isConstant(self, name: str) -> bool:
        """True when ``name`` is fixed at compile time."""
        self._check(name)
        return name not in self._variables

    @property
    def variables(self) -> Set[str]:
        """The variable attributes (``lr`` always among them)."""
        return set(self._variables)


#: The key of a poptorch optimizer's ``state_dict`` holding the device's optimizer state.
DEVICE_STATE_KEY = "ipupod_device_state"


class _PoptorchOptimizer:
    """The PopTorch half of ``poptorch.optim``: extra attributes, ``variable_attrs``, and
    ``state_dict`` / ``load_state_dict`` reading and writing the state on the device (the
    checkpoint's ``optimizer/...`` tensors) while a training model uses the optimizer."""

    def _init_poptorch(self, passed: Dict[str, Any], extras: Dict[str, Any]) -> None:
        for name, value in extras.items():
            setattr(self, name, _FP16_ATTRIBUTES[name] if value is None else value)
        names = set(self.defaults) | set(_FP16_ATTRIBUTES) - {"foreach"}
        self.variable_attrs = VariableAttributes(
            {k for k, v in passed.items() if v is not None}, names)
        self.device_state: Dict[str, Any] = {}  # the last state read from (or for) a device
        self.pending_device_state: Dict[str, Any] = {}  # written at the next attach
        self._read_device_state: Optional[Callable[[], Dict[str, Any]]] = None

    def state_dict(self) -> Dict[str, Any]:
        """torch's optimizer state_dict plus the device's optimizer state (when a training
        model runs this optimizer, read from its IPUs now)."""
        if self._read_device_state is not None:
            fresh = self._read_device_state()
            if fresh:
                self.device_state = fresh
        state = torch.optim.Optimizer.state_dict(self)
        state[DEVICE_STATE_KEY] = dict(self.device_state)
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a ``state_dict()``; its device state is written to the IPUs when a training
        model wrapped with this optimizer attaches."""
        state = dict(state_dict)
        self.device_state = dict(state.pop(DEVICE_STATE_KEY, {}))
        self.pending_device_state = dict(self.device_state)
        torch.optim.Optimizer.load_state_dict(self, state)


def _split(kwargs: Dict[str, Any]) -> tuple:
    extras = {k: kwargs.pop(k) for k in list(kwargs) if k in _FP16_ATTRIBUTES}
    return {k: v for k, v in kwargs.items() if v is not None}, extras


class SGD(_PoptorchOptimizer, torch.optim.SGD):
    """``poptorch.optim.SGD(params, lr, momentum=..., loss_scaling=..., ...)``."""

    def __init__(self, params: Any, lr: float = 0.01, **kwargs: Any) -> None:
        torch_args, extras = _split(kwargs)
        torch.optim.SGD.__init__(self, params, lr=lr, **torch_args)
        self._init_poptorch({"lr": lr, **torch_args, **extras}, extras)


class Adam(_PoptorchOptimizer, torch.optim.Adam):
    """``poptorch.optim.Adam(params, lr=1e-3, betas=..., ...)``."""

    def __init__(self, params: Any, lr: float = 1e-3, **kwargs: Any) -> None:
        torch_args, extras = _split(kwargs)
        torch.optim.Adam.__init__(self, params, lr=lr, **torch_args)
        self._init_poptorch({"lr": lr, **torch_args, **extras}, extras)


class AdamW(_PoptorchOptimizer, torch.optim.AdamW):
    """``poptorch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, ...)``."""

    def __init__(self, params: Any, lr: float = 1e-3, **kwargs: Any) -> None:
        torch_args, extras = _split(kwargs)
        torch.optim.AdamW.__init__(self, params, lr=lr, **torch_args)
        self._init_poptorch({"lr": lr, **torch_args, **extras}, extras)


class RMSprop(_PoptorchOptimizer, torch.optim.RMSprop):
    """``poptorch.optim.RMSprop(params, lr=0.01, alpha=0.99, ...)``."""

    def __init__(self, params: Any, lr: float = 0.01, **kwargs: Any) -> None:
        torch_args, extras = _split(kwargs)
        torch.optim.RMSprop.__init__(self, params, lr=lr, **torch_args)
        self._init_poptorch({"lr": lr, **torch_args, **extras}, extras)


class LAMB(_PoptorchOptimizer, torch.optim.Optimizer):
    """``poptorch.optim.LAMB``: Adam moments with a per-weight trust ratio
    ``min(||w||, max_weight_norm) / ||update||``. ``step()`` runs it on the CPU too."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, bias_correction: bool = True,
                 max_weight_norm: Optional[float] = None, **kwargs: Any) -> None:
        _, extras = _split(kwargs)
        if kwargs:
            raise TypeError(f"LAMB got unexpected arguments {sorted(kwargs)}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction,
                        max_weight_norm=math.inf if max_weight_norm is None else max_weight_norm)
        torch.optim.Optimizer.__init__(self, params, defaults)
        passed = {k: v for k, v in locals().items() if k in defaults}
        passed.update(extras)
        self._init_poptorch(_explicit(LAMB.__init__, passed), extras)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One LAMB update of every parameter with a gradient (on the CPU)."""
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for weight in group["params"]:
                if weight.grad is not None:
                    _lamb_update(weight, self.state[weight], group)
        return loss


def _explicit(function: Any, passed: Dict[str, Any]) -> Dict[str, Any]:
    """The arguments given a value other than their default."""
    defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()}
    return {k: v for k, v in passed.items() if k not in defaults or defaults[k] != v}


def _lamb_update(weight: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any]) -> None:
    beta1, beta2 = group["betas"]
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(weight)
        state["exp_avg_sq"] = torch.zeros_like(weight)
    state["step"] += 1
    state["exp_avg"].mul_(beta1).add_(weight.grad, alpha=1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(weight.grad, weight.grad, value=1 - beta2)
    m, v = state["exp_avg"], state["exp_avg_sq"]
    if group["bias_correction"]:
        m = m / (1 - beta1 ** state["step"])
        v = v / (1 - beta2 ** state["step"])
    update = m / (v.sqrt() + group["eps"]) + group["weight_decay"] * weight
    weight_norm = min(weight.norm().item(), group["max_weight_norm"])
    update_norm = update.norm().item()
    trust = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
    weight.add_(update, alpha=-group["lr"] * trust)


@dataclasses.dataclass
class GroupSpec:
    """One of several param groups as the compiler takes it: its parameters' names
    (``weights``), the ``attrs`` to send (``lr``, its variables, and what differs from the
    first group), every attribute's ``values``, and the ``variables`` setOptimizer may
    change."""

    weights: List[str]
    attrs: Dict[str, float]
    values: Dict[str, float]
    variables: Set[str]


@dataclasses.dataclass
class OptimizerSpec:
    """An optimizer as the compiler takes it: ``name``, ``attrs`` to send (the variables and
    the constants off their default), every attribute's ``values`` and the ``constants``;
    with several param groups, ``groups`` (none with one: its values are ``values``)."""

    name: str
    attrs: Dict[str, float]
    values: Dict[str, float]
    constants: Set[str]
    groups: Tuple[GroupSpec, ...] = ()  # a class default: pickles from before groups read


_NAMES = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
          torch.optim.RMSprop: "rmsprop", LAMB: "lamb"}


def _name_of(optimizer: Any) -> str:
    for cls in type(optimizer).__mro__:
        if cls in _NAMES:
            return _NAMES[cls]
    raise ValueError(f"ipupod trains with SGD, Adam, AdamW, RMSprop (torch.optim or "
                     f"poptorch.optim) and poptorch.optim.LAMB, not {type(optimizer).__name__}; "
                     f"use one of those")


def _group_values(optimizer: Any, group: Mapping[str, Any]) -> Dict[str, float]:
    """One param group's attributes; the optimizer's own (``opt.loss_scaling = 2.0``) where
    the group has none."""
    values: Dict[str, float] = {}
    for key, value in group.items():
        if key in _UNSUPPORTED and value:
            raise ValueError(f"{key}=True is not supported by ipupod's optimizers; leave it "
                             f"False")
        if key == "betas":
            values["beta1"], values["beta2"] = float(value[0]), float(value[1])
        elif isinstance(value, (bool, int, float)) and key not in _UNSUPPORTED:
            values[key] = float(value)
    for key in ("loss_scaling", "velocity_scaling", *_STATE_TYPES):  # opt.loss_scaling = 2.0
        value = getattr(optimizer, key, None)
        if key not in values and value is not None:
            values[key] = _bits(value) if key in _STATE_TYPES else float(value)
    return values


def _bits(dtype: Any) -> float:
    """A PopTorch accumulator type as the compiler's bits: 16 for torch.half, 32 for float."""
    if dtype in (torch.half, torch.float):
        return 16.0 if dtype == torch.half else 32.0
    raise ValueError(f"accumulator types are torch.half or torch.float, not {dtype!r}")


def _variables(optimizer: Any, name: str, values: Dict[str, float]) -> Set[str]:
    """PopTorch's rule: poptorch.optim's explicit arguments (or as marked); torch.optim's
    attributes off torch's defaults; lr always."""
    if isinstance(optimizer, _PoptorchOptimizer):
        marked = optimizer.variable_attrs.variables
        if "betas" in marked:
            marked |= {"beta1", "beta2"}
        return marked | {"lr"}
    defaults = {k: p.default for k, p in inspect.signature(type(optimizer).__init__)
                .parameters.items()}
    if "betas" in defaults:
        defaults["beta1"], defaults["beta2"] = defaults.pop("betas")
    return {k for k, v in values.items()
            if k == "lr" or (k in defaults and defaults[k] is not inspect.Parameter.empty
                             and float(defaults[k]) != v)}


def _check_shared(per_group: List[Dict[str, float]]) -> None:
    """PopTorch's rule: what it takes once per optimizer is equal in every param group."""
    first = per_group[0]
    for index, values in enumerate(per_group[1:], start=1):
        for key in sorted(_SHARED & (set(first) | set(values))):
            if values.get(key) != first.get(key):
                raise ValueError(
                    f"param groups differ in '{key}' ({first.get(key)!r} in group 0, "
                    f"{values.get(key)!r} in group {index}); '{key}' must be the same for "
                    f"every param group (PopTorch takes its float16 attributes other than "
                    f"velocity_scaling once per optimizer, and the flags fix the optimizer "
                    f"state): set it on the optimizer")


def _names(optimizer: Any, model: Any) -> List[List[str]]:
    """Every param group's parameters as the model names them."""
    if model is None:
        raise ValueError("an optimizer with several param groups needs the model to name "
                         "their parameters: describe(optimizer, model)")
    by_id = {id(p): n for n, p in model.named_parameters()}
    names = []
    for index, group in enumerate(optimizer.param_groups):
        missing = [tuple(p.shape) for p in group["params"] if id(p) not in by_id]
        if missing:
            raise ValueError(f"param group {index} holds tensors of shape {missing[0]} that "
                             f"are not parameters of the model; optimize the wrapped model's "
                             f"parameters")
        names.append([by_id[id(p)] for p in group["params"]])
    return names


def _groups(optimizer: Any, name: str, per_group: List[Dict[str, float]], model: Any
            ) -> Tuple[GroupSpec, ...]:
    """One GroupSpec per param group: lr, its variables and what differs from group 0."""
    first = per_group[0]
    out = []
    for weights, values in zip(_names(optimizer, model), per_group):
        variables = (_variables(optimizer, name, values) | {"lr"}) - _SHARED
        attrs = {k: v for k, v in values.items()
                 if k not in _SHARED and (k in variables or v != first.get(k))}
        out.append(GroupSpec(weights=weights, attrs=attrs, values=values, variables=variables))
    return tuple(out)


def describe(optimizer: Any, model: Any = None) -> OptimizerSpec:
    """The compiler's view of ``optimizer`` (ValueError for one ipupod cannot run). With
    several param groups, ``model`` names their parameters."""
    name = _name_of(optimizer)
    defaults = _COMPILER_DEFAULTS[name]
    per_group = [{k: v for k, v in _group_values(optimizer, g).items() if k in defaults}
                 for g in optimizer.param_groups]
    _check_shared(per_group)
    values = per_group[0]
    variables = _variables(optimizer, name, values) - _FLAGS
    attrs = {k: v for k, v in values.items() if k in variables or v != defaults[k]}
    constants = set(defaults) - variables
    groups = _groups(optimizer, name, per_group, model) if len(per_group) > 1 else ()
    return OptimizerSpec(name=name, attrs=attrs, values=values, constants=constants,
                         groups=groups)


def _constant_error(key: str) -> ValueError:
    return ValueError(f"optimizer attribute '{key}' is a constant of the compiled "
                      f"model; mark it as a variable (variable_attrs.markAsVariable"
                      f"('{key}')) or pass it to the constructor before compiling")


def changes(compiled: OptimizerSpec, new: OptimizerSpec) -> Dict[str, float]:
    """The variables to set for ``new`` on an executable compiled for ``compiled`` (a param
    group's as ``group/<i>/<attr>``); ValueError when the optimizer kind, the param groups'
    parameters or a constant would change."""
    if new.name != compiled.name:
        raise ValueError(f"the model was compiled with {compiled.name}, not {new.name}; wrap "
                         f"the model again to change the optimizer")
    if [sorted(g.weights) for g in new.groups] != [sorted(g.weights) for g in compiled.groups]:
        raise ValueError(f"the param groups changed ({len(compiled.groups) or 1} compiled, "
                         f"{len(new.groups) or 1} now, or their parameters differ); wrap the "
                         f"model again to change them")
    grouped = bool(compiled.groups)
    changed = {k: v for k, v in new.values.items()
               if compiled.values.get(k) != v and not (grouped and k not in _SHARED)}
    for key in changed:
        if key in compiled.constants or key not in compiled.attrs:
            raise _constant_error(key)
    for index, (was, now) in enumerate(zip(compiled.groups, new.groups)):
        for key, value in now.values.items():
            if key in _SHARED or was.values.get(key) == value:
                continue
            if key not in was.variables or key not in was.attrs:
                raise _constant_error(key)
            changed[f"group/{index}/{key}"] = value
    return changed


def applied(compiled: OptimizerSpec, changed: Mapping[str, float]) -> OptimizerSpec:
    """``compiled`` after :func:`changes`' ``changed`` were set."""
    values = {k: v for k, v in changed.items() if not k.startswith("group/")}
    groups = []
    for index, group in enumerate(compiled.groups):
        prefix = f"group/{index}/"
        mine = {k[len(prefix):]: v for k, v in changed.items() if k.startswith(prefix)}
        groups.append(dataclasses.replace(group, values={**group.values, **mine}))
    return dataclasses.replace(compiled, values={**compiled.values, **values},
                               groups=tuple(groups))


def compile_groups(spec: OptimizerSpec, trained: Iterable[str]) -> List[Dict[str, Any]]:
    """``spec``'s param groups for ``Client.compile(param_groups=...)``, naming only the
    ``trained`` weights (the exported graph's, not frozen); [] with one group."""
    keep = set(trained)
    return [{"params": [w for w in g.weights if w in keep], **g.attrs} for g in spec.groups]
