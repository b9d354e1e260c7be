#!/usr/bin/python3
"""Builds end-to-end run cases for tests/integration/run_parity_test.

Usage: /usr/bin/python3 make_run_cases.py OUT_DIR

For each case NAME this writes, into OUT_DIR/NAME/:
  model.onnx        the model, exported by torch.onnx.export for one micro-batch
  ipu_config.json   the optimum-graphcore IPUConfig to compile it with
  module_map.json   (some cases) a module-name to IPU map, as in seed 002
  inputs.npz        several steps of samples, keyed by ONNX input name (in0, ...)
  expected.npz      torch's outputs (eager, fp32) for every sample, micro-batch by
                    micro-batch, concatenated along dim 0, keyed by output name
and one line "NAME SAMPLES_PER_STEP STEPS RTOL ATOL" per case in OUT_DIR/manifest.txt.

The models are those of make_models.py, and torchvision's ResNet-18 and
MobileNetV2 (python3-torchvision, randomly initialised). Everything is seeded, so reruns write
identical files. Exits with status 77 (skip) if torch or numpy is missing.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
    import torch
    import make_models as mm
except ImportError as e:  # the C++ test turns this into GTEST_SKIP
    print("make_run_cases.py: cannot import torch/numpy: %s" % e, file=sys.stderr)
    sys.exit(77)


def cases():
    """(name, module, one micro-batch of example inputs, sample maker, config, steps).

    The config may carry "module_map" (written to module_map.json, not to the IPUConfig).
    """
    torch.manual_seed(1)
    yield ("mlp_1ipu", mm.Mlp(), (torch.randn(4, 784),),
           lambda n: (torch.randn(n, 784),),
           {"inference_device_iterations": 2}, 3)
    torch.manual_seed(5)
    # Three Linear layers over 4 IPUs: IPU 2 idles, as a module map allows.
    yield ("mlp_pipelined_4ipu_x2", mm.Mlp(), (torch.randn(4, 784),),
           lambda n: (torch.randn(n, 784),),
           {"module_map": {"fc1": 0, "fc2": 1, "fc3": 3}, "inference_replication_factor": 2,
            "inference_device_iterations": 4}, 2)
    torch.manual_seed(2)
    yield ("gelu_classifier_1ipu", mm.GeluClassifier(), (torch.randn(6, 64),),
           lambda n: (torch.randn(n, 64),),
           {}, 4)
    torch.manual_seed(6)
    yield ("gelu_classifier_pipelined_4ipu_x2", mm.GeluClassifier(), (torch.randn(6, 64),),
           lambda n: (torch.randn(n, 64),),
           {"layers_per_ipu": [2, 1, 2, 1], "inference_replication_factor": 2,
            "inference_device_iterations": 4}, 2)
    torch.manual_seed(3)
    yield ("tiny_gpt_1ipu", mm.TinyGpt(), (torch.randint(0, 50, (2, 8)),),
           lambda n: (torch.randint(0, 50, (n, 8)),),
           {"inference_device_iterations": 2}, 3)
    torch.manual_seed(4)
    yield ("tiny_gpt_pipelined_4ipu_x2", mm.TinyGpt(n_layer=4), (torch.randint(0, 50, (2, 8)),),
           lambda n: (torch.randint(0, 50, (n, 8)),),
           {"layers_per_ipu": [1, 1, 1, 1], "inference_replication_factor": 2,
            "inference_device_iterations": 4}, 2)
    torch.manual_seed(12)
    # x: 4 rows per micro-batch, mask: 1; a step of 2 x 2 micro-batches takes 16 and 4.
    yield ("masked_rows_differ_x2", MaskedFeatures(), (torch.randn(4, 16), torch.rand(1, 16)),
           lambda n: (torch.randn(n, 16), torch.rand(n // 4, 16)),
           {"inference_device_iterations": 2, "inference_replication_factor": 2}, 3)


class MaskedFeatures(torch.nn.Module):
    """A batch beside a per-micro-batch mask: inputs whose dim 0 differ (PopTorch's features
    chapter, 4.3), which `ipupod run` cuts into steps input by input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x, mask):
        return self.fc(x * mask)


def vision_model(name):
    """A torchvision classifier, randomly initialised (nothing is downloaded),
    with BatchNorm running statistics measured on random images so that its
    eval-mode activations keep their scale (the initial statistics would let
    MobileNetV2's outputs shrink to 1e-9)."""
    import torchvision
    model = getattr(torchvision.models, name)(weights=None)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None  # a cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(8, 3, 224, 224))
    return model.eval()


def vision_cases():
    """ResNet-18, MobileNetV2, MobileNetV3 and Swin-T on a batch of 224x224 images, at the
    tolerance the issue sets for them (rtol 1e-4, atol 1e-5)."""
    for seed, name in ((7, "resnet18"), (8, "mobilenet_v2"), (9, "mobilenet_v3_small"),
                       (10, "swin_t")):
        torch.manual_seed(seed)
        yield ("%s_1ipu" % name, vision_model(name), (torch.randn(4, 3, 224, 224),),
               lambda n: (torch.randn(n, 3, 224, 224),), {}, 1, (1e-4, 1e-5))


def samples_per_step(micro_batch, config):
    return (micro_batch * config.get("inference_device_iterations", 1)
            * config.get("inference_replication_factor", 1))


def reference(module, samples, micro_batches):
    """Outputs of every micro-batch in order, concatenated along dim 0; input i gives each
    micro-batch micro_batches[i] rows."""
    chunks = None
    with torch.no_grad():
        for k in range(samples[0].shape[0] // micro_batches[0]):
            outputs = module(*[s[k * m:(k + 1) * m] for s, m in zip(samples, micro_batches)])
            if isinstance(outputs, torch.Tensor):
                outputs = (outputs,)
            if chunks is None:
                chunks = [[] for _ in outputs]
            for i, t in enumerate(outputs):
                chunks[i].append(t.numpy())
    return [np.concatenate(c, axis=0) for c in chunks]


def write_case(out_dir, name, module, example, make_samples, config, steps,
               tolerance=(1e-5, 1e-6)):
    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    module.eval()
    micro_batch = example[0].shape[0]
    with torch.no_grad():
        probe = module(*example)
    n_outputs = 1 if isinstance(probe, torch.Tensor) else len(probe)
    torch.onnx.export(module, example, os.path.join(case_dir, "model.onnx"), opset_version=14,
                      input_names=["in%d" % i for i in range(len(example))],
                      output_names=["out%d" % i for i in range(n_outputs)])
    config = dict(config)
    module_map = config.pop("module_map", None)
    if module_map is not None:
        with open(os.path.join(case_dir, "module_map.json"), "w") as f:
            json.dump(module_map, f)
    with open(os.path.join(case_dir, "ipu_config.json"), "w") as f:
        json.dump(config, f)
    step = samples_per_step(micro_batch, config)
    samples = make_samples(step * steps)
    np.savez(os.path.join(case_dir, "inputs.npz"),
             **{"in%d" % i: s.numpy() for i, s in enumerate(samples)})
    expected = reference(module, samples, [e.shape[0] for e in example])
    np.savez(os.path.join(case_dir, "expected.npz"),
             **{"out%d" % i: t for i, t in enumerate(expected)})
    return "%s %d %d %g %g\n" % (name, step, steps, tolerance[0], tolerance[1])


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    lines = [write_case(out_dir, *case) for case in cases()]
    lines += [write_case(out_dir, *case) for case in vision_cases()]
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
