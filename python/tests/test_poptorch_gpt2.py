"""Acceptance (issue 28): optimum-graphcore's GPT-2 ``parallelize()`` (seed 000) runs unchanged
through ``ipupod.poptorch``.

``transformers`` and ``optimum`` are not packaged on Debian, so this file builds a small GPT-2
with Hugging Face's module names and structure (``transformer.wte``/``wpe``/``h.N`` with
``ln_1``, ``attn`` (``c_attn``, ``c_proj``: HF's ``Conv1D``), ``ln_2``, ``mlp`` (``c_fc``,
``c_proj``), ``ln_f``, and ``lm_head`` tied to ``wte``; the causal mask buffer ``bias`` and
``masked_bias`` as GPT-2's attention registers them in transformers 1.x to 4.10), and
re-implements, from optimum-graphcore's ``modeling_utils.py``, the pieces ``parallelize()``
calls: ``SerializedEmbedding``, ``recomputation_checkpoint``, ``outline_attribute``,
``get_layer_ipu``, ``OptimizedGPT2Attention`` and an ``IPUConfig`` with the keys it reads.

The lines between ``# seed begin`` and ``# seed end`` are the seed's ``parallelize()``,
unchanged. The model is then trained with ``poptorch.trainingModel`` and compared, step by
step, with the same model without ``parallelize()`` trained by torch on the CPU; its trained
weights then go through ``ipupod run --weights`` into an inference executable compiled with
the CLI, whose logits must equal torch's.
"""

import copy
import logging
import math
import re
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from torch import nn  # noqa: E402

import ipupod.poptorch as poptorch  # noqa: E402
from ipupod.poptorch import export  # noqa: E402
from ipupod.testing import find_binary  # noqa: E402

logger = logging.getLogger("optimum.graphcore.test")


@pytest.fixture
def server(ipupod_server, monkeypatch):
    monkeypatch.setenv("IPUPOD_SERVER", ipupod_server.address)
    monkeypatch.setenv("IPUPOD_USER", "optimum-user")
    monkeypatch.delenv("IPUPOD_TOKEN", raising=False)
    return ipupod_server


# ------------------------------------------------------------------ Hugging Face's GPT-2

class GPT2Config:
    def __init__(self, vocab_size=50, n_positions=16, n_embd=32, n_layer=3, n_head=4):
        self.vocab_size, self.n_positions, self.max_position_embeddings = \
            vocab_size, n_positions, n_positions
        self.n_embd = self.hidden_size = n_embd
        self.n_layer = self.num_hidden_layers = n_layer
        self.n_head = n_head
        self.layer_norm_epsilon = 1e-5
        self.scale_attn_weights, self.scale_attn_by_inverse_layer_idx = True, False
        # Dropout off, so the IPU and the CPU compute the same function (dropout's masks are
        # ipupod's own, docs/differences.md).
        self.attn_pdrop = self.resid_pdrop = self.embd_pdrop = 0.0


class Conv1D(nn.Module):
    """HF's Conv1D: a Linear whose weight is stored transposed, [nx, nf]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(nn.init.normal_(torch.empty(nx, nf), std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        n = config.max_position_embeddings
        self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.embed_dim, self.num_heads = config.n_embd, config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = config.scale_attn_weights
        self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
        self.layer_idx, self.is_cross_attention = layer_idx, False
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        w = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            w = w / (float(value.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)
        mask = self.bias[:, :, ns - nd:ns, :ns]
        w = torch.where(mask.bool(), w, self.masked_bias.to(w.dtype))
        w = nn.functional.softmax(w, dim=-1)
        w = self.attn_dropout(w)
        return torch.matmul(w, value), w

    def _split_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.view(tensor.size()[:-1] + (num_heads, attn_head_size))
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (num_heads * attn_head_size,))

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output, attn_weights = self._attn(query, key, value)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.resid_dropout(self.c_proj(attn_output))
        return (attn_output, None)


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, config):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, intermediate_size)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states):
        hidden_states = nn.functional.gelu(self.c_fc(hidden_states), approximate="tanh")
        return self.dropout(self.c_proj(hidden_states))


class GPT2Block(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx=layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(4 * config.n_embd, config)

    def forward(self, hidden_states):
        attn_output = self.attn(self.ln_1(hidden_states))[0]
        hidden_states = attn_output + hidden_states
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        return (hidden_states,)  # use_cache=False, output_attentions=False


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config, layer_idx=i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, input_ids):
        input_shape = input_ids.size()
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            hidden_states = block(hidden_states)[0]
        return (self.ln_f(hidden_states),)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self):
        self.lm_head.weight = self.transformer.wte.weight

    def resize_token_embeddings(self, new_num_tokens):
        raise AssertionError("not reached: the vocabulary is a multiple of the factor")

    def forward(self, input_ids, labels=None):
        lm_logits = self.lm_head(self.transformer(input_ids)[0])
        if labels is None:
            return (lm_logits,)
        shift_logits = lm_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = nn.CrossEntropyLoss()(shift_logits.view(-1, shift_logits.size(-1)),
                                     shift_labels.view(-1))
        return (loss, lm_logits)


# ------------------------------------------------------------------ optimum-graphcore's pieces

class IPUConfig:
    """The IPUConfig keys ``parallelize()`` reads (optimum keeps the per-mode ones behind
    ``_layers_per_ipu`` and ``_ipus_per_replica``) and the dict ``Options.ipuConfig`` takes."""

    def __init__(self, **kwargs):
        self.layers_per_ipu = [-1]
        self.ipus_per_replica = 1
        self.embedding_serialization_factor = 1
        self.recompute_checkpoint_every_layer = False
        self.gradient_accumulation_steps = 1
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def _layers_per_ipu(self):
        return self.layers_per_ipu

    @property
    def _ipus_per_replica(self):
        return self.ipus_per_replica

    def to_dict(self):
        return {k: copy.deepcopy(v) for k, v in vars(self).items()}


def _expand_layers_per_ipu_wildcard(ipu_config, target_number_of_layers):
    layers_per_ipu = copy.deepcopy(ipu_config._layers_per_ipu)
    ipus = ipu_config._ipus_per_replica
    if not isinstance(target_number_of_layers, int):
        target_number_of_layers = len(target_number_of_layers)
    if ipus == 1:
        return [target_number_of_layers]
    if layers_per_ipu in ([-1], [-1] * ipus):
        quotient, remainder = divmod(target_number_of_layers, ipus)
        layers_per_ipu = [quotient] * ipus
        layers_per_ipu[-1] += remainder
    elif -1 in layers_per_ipu:
        wildcards = [i for i, v in enumerate(layers_per_ipu) if v == -1]
        left = target_number_of_layers - sum(v for v in layers_per_ipu if v != -1)
        quotient, remainder = divmod(left, len(wildcards))
        for i in wildcards:
            layers_per_ipu[i] = quotient
        layers_per_ipu[wildcards[-1]] += remainder
    assert len(layers_per_ipu) == ipus and sum(layers_per_ipu) == target_number_of_layers
    return layers_per_ipu


def get_layer_ipu(ipu_config, target_number_of_layers=None):
    layer_ipu = []
    for ipu, n_layers in enumerate(_expand_layers_per_ipu_wildcard(ipu_config,
                                                                   target_number_of_layers)):
        layer_ipu += [ipu] * n_layers
    return layer_ipu


def recomputation_checkpoint(module):
    """A forward hook making the module's outputs recomputation checkpoints."""
    def recompute_outputs(module, inputs, outputs):
        if isinstance(outputs, torch.Tensor):
            return poptorch.recomputationCheckpoint(outputs)
        if isinstance(outputs, tuple):
            return tuple(poptorch.recomputationCheckpoint(y) for y in outputs)
        return None
    return module.register_forward_hook(recompute_outputs)


def outline_attribute(module, value):
    """Hooks entering and leaving ``poptorch.Attribute(__outline={"layer": value})``."""
    context = poptorch.Attribute(__outline={"layer": value})

    def enable(*args):
        context.__enter__()

    def disable(*args):
        context.__exit__(None, None, None)

    return [module.register_forward_pre_hook(enable), module.register_forward_hook(disable)]


class SerializedEmbedding(nn.Module):
    """The embedding split into ``serialization_factor`` embeddings over vocabulary slices
    (each a view of the original table), each looked up with the ids masked to its slice."""

    def __init__(self, embedding, serialization_factor):
        super().__init__()
        self.serialization_factor = serialization_factor
        self.num_embeddings = embedding.num_embeddings
        assert self.num_embeddings % self.serialization_factor == 0
        self.split_size = self.num_embeddings // self.serialization_factor
        freeze = not embedding.weight.requires_grad
        self.padding_idx = embedding.padding_idx
        self.split_embeddings = nn.ModuleList([
            nn.Embedding.from_pretrained(
                embedding.weight[i * self.split_size:(i + 1) * self.split_size, :].detach(),
                freeze=freeze)
            for i in range(self.serialization_factor)])

    @classmethod
    def from_model(cls, embedding, serialization_factor):
        return cls(embedding, serialization_factor)

    def forward(self, indices):
        x_sum = None
        for i in range(self.serialization_factor):
            split_indices = indices - i * self.split_size
            mask = (split_indices >= 0) * (split_indices < self.split_size)
            mask = mask.detach()
            split_indices *= mask
            x = self.split_embeddings[i](split_indices)
            x *= mask.unsqueeze(-1)
            x_sum = x if x_sum is None else x_sum + x
        return x_sum


class OptimizedGPT2Attention(GPT2Attention):
    """optimum's attention: the causal mask added as (1 - mask) * finfo.min."""

    def _attn(self, query, key, value, attention_mask=None, head_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        if self.scale_attn_weights:
            attn_weights *= 1.0 / (value.size(-1) ** 0.5)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length].to(
            dtype=attn_weights.dtype)
        attn_weights = attn_weights + (1.0 - causal_mask) * torch.finfo(attn_weights.dtype).min
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights.type(value.dtype))
        return torch.matmul(attn_weights, value), attn_weights


class PipelineMixin:
    def parallelize(self):
        self._hooks = []
        assert getattr(self, "ipu_config", None) is not None
        return self


class PipelinedGPT2LMHeadModel(GPT2LMHeadModel, PipelineMixin):
    def __init__(self, config, ipu_config):
        super().__init__(config)
        self.ipu_config = ipu_config

    # seed begin
    def parallelize(self):
        """
        Transform the GPT2 model body to run in an IPU pipeline.
        - Adds pipeline stages to the model
        - (If enabled) Replaces the word embedding with a SerializedEmbedding
        - Adds recomputation checkpoints
        """
        super().parallelize()

        # Use optimized attention
        for layer in self.transformer.h:
            layer.attn.__class__ = OptimizedGPT2Attention

        if self.ipu_config.embedding_serialization_factor > 1:
            # Resize token embedding using padding if vocab_size is not a multiple of embedding_serialization_factor.
            self.actual_vocab_size = self.config.vocab_size
            new_vocab_size = (
                math.ceil(self.config.vocab_size / self.ipu_config.embedding_serialization_factor)
                * self.ipu_config.embedding_serialization_factor
            )
            if new_vocab_size > self.actual_vocab_size:
                self.resize_token_embeddings(new_vocab_size)

            self.transformer.wte = SerializedEmbedding.from_model(
                self.transformer.wte, self.ipu_config.embedding_serialization_factor
            )

        logger.info("-------------------- Device Allocation --------------------")
        logger.info("Embedding  --> IPU 0")
        self.transformer.wte = poptorch.BeginBlock(self.transformer.wte, "Token embedding", ipu_id=0)
        self.transformer.wpe = poptorch.BeginBlock(self.transformer.wpe, "Position embedding", ipu_id=0)
        hs = outline_attribute(self.transformer.ln_f, "LayerNorm")
        self._hooks.extend(hs)

        layer_ipu = get_layer_ipu(self.ipu_config, self.transformer.h)
        for index, layer in enumerate(self.transformer.h):
            ipu = layer_ipu[index]
            if self.ipu_config.recompute_checkpoint_every_layer and index != self.config.num_hidden_layers - 1:
                h = recomputation_checkpoint(layer)
                self._hooks.append(h)
            self.transformer.h[index] = poptorch.BeginBlock(layer, f"Layer{index}", ipu_id=ipu)
            logger.info(f"Layer {index:<2}   --> IPU {ipu}")
        return self
    # seed end


# ------------------------------------------------------------------ the tests

CONFIG = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=3, n_head=4)
MICRO_BATCH, ACCUMULATION, SEQUENCE = 2, 4, 8


def make_ipu_config():
    return IPUConfig(embedding_serialization_factor=2, recompute_checkpoint_every_layer=True,
                     layers_per_ipu=[1, 2], ipus_per_replica=2,
                     gradient_accumulation_steps=ACCUMULATION, seed=11)


def make_models(seed=0):
    """(the model parallelize() transforms, the same model left as it is)."""
    torch.manual_seed(seed)
    model = PipelinedGPT2LMHeadModel(GPT2Config(**CONFIG), make_ipu_config())
    return model, copy.deepcopy(model)


def batch(seed, samples=MICRO_BATCH * ACCUMULATION):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, CONFIG["vocab_size"], (samples, SEQUENCE), generator=generator)


def test_parallelize_keeps_the_function_and_the_tied_table():
    model, reference = make_models()
    model.parallelize()
    wte = model.transformer.wte
    assert isinstance(wte, SerializedEmbedding) and wte.split_size == 25
    # optimum's split embeddings are row blocks of the table the LM head still reads.
    for i, split in enumerate(wte.split_embeddings):
        assert split.weight.data_ptr() == model.lm_head.weight[25 * i].data_ptr()
    assert all(type(layer.attn) is OptimizedGPT2Attention for layer in model.transformer.h)
    # outline_attribute's two hooks, and a checkpoint on every layer but the last
    assert len(model._hooks) == 2 + 2
    ids = batch(1)
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], reference(ids)[0], rtol=1e-5, atol=1e-5)


def test_export_serializes_the_lookup_over_the_one_tied_table():
    model, _ = make_models()
    model.parallelize()
    ids = batch(2, MICRO_BATCH)
    exported = export.export(model, (ids, ids), ["input_ids", "labels"], True,
                             poptorch.PipelinedExecution())
    proto = onnx.load_from_string(exported.onnx)
    ops = {n.op_type for n in proto.graph.node}
    assert {"GreaterOrEqual", "Less", "And"} <= ops
    assert "ai.graphcore" not in {n.domain for n in proto.graph.node}  # every marker folded
    # The split embeddings are slices of lm_head.weight: no weight of their own.
    initializers = {i.name for i in proto.graph.initializer}
    assert "lm_head.weight" in initializers
    assert not any("split_embeddings" in name for name in initializers)
    assert exported.weights.count("lm_head.weight") == 1
    slices = [n for n in proto.graph.node if n.op_type == "Slice"
              and n.input[0] == "lm_head.weight"]
    assert len(slices) == 2

    def with_attribute(name):
        return [n for n in proto.graph.node if any(a.name == name for a in n.attribute)]
    # A checkpoint on the output of every layer but the last (its final residual Add).
    checkpoints = [re.sub(r"/__ipupod_\w+?_\d+", "", n.name)  # export scopes
                   for n in with_attribute("recompute_checkpoint")]
    assert sorted(checkpoints) == ["/transformer/h.0/Add_1", "/transformer/h.1/Add_1"]
    outlined = with_attribute("__outline")
    assert outlined and all("ln_f" in n.name for n in outlined)
    assert [onnx.helper.get_attribute_value(a) for a in outlined[0].attribute
            if a.name == "__outline"] == [[b"layer", b"LayerNorm"]]
    assert exported.block_ipus == 2


@pytest.mark.ipupod(pod="POD4")
def test_checkpoints_and_outlining_reach_the_memory_plan(server):
    def report(checkpoints, every_layer):
        """The training plan of the parallelized model (with optimum's checkpoints or
        without), compiled with recompute_checkpoint_every_layer as given."""
        model, _ = make_models()
        model.ipu_config.recompute_checkpoint_every_layer = checkpoints
        model.parallelize()
        ids = batch(3, MICRO_BATCH)
        exported = export.export(model, (ids, ids), ["input_ids", "labels"], True,
                                 poptorch.PipelinedExecution())
        config = dict(model.ipu_config.to_dict(), recompute_checkpoint_every_layer=every_layer)
        with server.client() as client:
            return client.compile(exported.onnx, config, train=True,
                                  loss=export.loss_name(exported), report=True).report

    both = report(checkpoints=True, every_layer=True)
    assert both["recompute"] and both["recompute_checkpoints"] == "layer+checkpoint"
    assert any("PopART attribute '__outline'" in note and "changes nothing" in note
               for note in both["notes"]), both["notes"]
    # optimum's checkpoints recompute the pipeline on their own, as PopTorch does...
    own = report(checkpoints=True, every_layer=False)
    assert own["recompute"] and own["recompute_checkpoints"] == "checkpoint"
    # ...and keep less for the backward pass than a pipeline without them.
    kept = report(checkpoints=False, every_layer=False)
    assert not kept["recompute"]
    assert own["ipus"][0]["activation_bytes"] < kept["ipus"][0]["activation_bytes"]
    assert own["ipus"][0]["flops_per_micro_batch"] > kept["ipus"][0]["flops_per_micro_batch"]


def _cli(server, *args):
    done = subprocess.run([find_binary("ipupod", "IPUPOD_CLI_BINARY"), "--server",
                           server.address, "--user", "optimum-user", *args],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done


def train(model, reference, steps):
    """Trains the parallelized ``model`` on ipupod and ``reference`` with torch on the CPU,
    on the same batches; returns the IPU's and the CPU's loss of each step's last
    micro-batch (PopTorch's default output mode for training)."""
    ipu_config = model.ipu_config
    options = poptorch.Options().ipuConfig(ipu_config.to_dict())
    # optimum's IPUConfig.to_options() sets these setters from the same keys
    options.Training.gradientAccumulation(ipu_config.gradient_accumulation_steps)
    options.randomSeed(ipu_config.seed)
    # SGD with momentum: linear in the gradients, so parity does not hinge on the rounding
    # of gradients that are zero in exact arithmetic (the key bias's), as Adam's would.
    training_model = poptorch.trainingModel(
        model, options, poptorch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    cpu_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        ids = batch(100 + step)
        loss, logits = training_model(ids, ids)
        assert logits.shape == (MICRO_BATCH, SEQUENCE, CONFIG["vocab_size"])
        with torch.no_grad():
            last = reference(ids[-MICRO_BATCH:], ids[-MICRO_BATCH:])[0]
        cpu_optimizer.zero_grad()
        reference(ids, ids)[0].backward()
        cpu_optimizer.step()
        losses.append((loss, last))
    training_model.copyWeightsToHost()
    return training_model, losses


@pytest.mark.ipupod(pod="POD4")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # HF's float(v.size(-1))
def test_parallelized_gpt2_trains_as_torch_and_its_weights_run_in_the_cli(server, tmp_path):
    model, reference = make_models()
    model.parallelize()
    training_model, losses = train(model, reference, steps=4)
    for loss, cpu_loss in losses:
        torch.testing.assert_close(loss, cpu_loss, rtol=1e-4, atol=1e-5)
    assert losses[-1][0] < losses[0][0]
    summary = training_model._executable.summary
    assert summary["stages"] == 2 and summary["ipus"]["per_replica"] == 2
    # Every weight came back, the tied table once for both of its uses.
    trained_state = model.state_dict()
    for name, value in reference.state_dict().items():
        mine = trained_state["lm_head.weight" if name == "transformer.wte.weight" else name]
        torch.testing.assert_close(mine, value, rtol=1e-4, atol=1e-5, msg=name)
    for i, split in enumerate(model.transformer.wte.split_embeddings):
        assert torch.equal(split.weight, model.lm_head.weight[25 * i:25 * (i + 1)])

    # The trained module as the transformers model it came from (both tied names).
    trained = GPT2LMHeadModel(GPT2Config(**CONFIG))
    state = {k: v for k, v in trained_state.items() if "split_embeddings" not in k}
    state["transformer.wte.weight"] = model.lm_head.weight.detach().clone()
    trained.load_state_dict(state)
    trained.eval()
    # An inference executable of a freshly initialised GPT-2: only --weights makes it the
    # trained one.
    torch.manual_seed(99)
    fresh = GPT2LMHeadModel(GPT2Config(**CONFIG)).eval()
    ids = batch(7, 4)
    onnx_path, ipx = str(tmp_path / "gpt2.onnx"), str(tmp_path / "gpt2.ipx")
    torch.onnx.export(fresh, (ids[:2],), onnx_path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=14, do_constant_folding=False)
    _cli(server, "compile", onnx_path, "-o", ipx)
    weights, inputs = str(tmp_path / "trained.npz"), str(tmp_path / "ids.npz")
    outputs = str(tmp_path / "logits.npz")
    np.savez(weights, **{k: v.detach().numpy() for k, v in trained.state_dict().items()})
    assert {"transformer.wte.weight", "lm_head.weight"} <= set(np.load(weights).files)
    np.savez(inputs, input_ids=ids.numpy())
    _cli(server, "run", ipx, "--inputs", inputs, "--outputs", outputs, "--weights", weights)
    with torch.no_grad():
        expected, cpu_trained = trained(ids)[0], reference.eval()(ids)[0]
    logits = torch.from_numpy(np.load(outputs)["logits"])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits, cpu_trained, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        untrained = fresh(ids)[0]
    assert not torch.allclose(logits, untrained, atol=1e-3)
