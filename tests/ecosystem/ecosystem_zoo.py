"""The models of tests/ecosystem, each built by its library's own code from whichever
`torch` is imported: PyTorch in the reference process (ecosystem_reference.py), kiln in
the test process (under eager.alias.torch_is_eager). Both run the same stages on them:

    forward    the model in training mode on a fixed input: its output and loss
    backward   loss.backward(): the gradient of every parameter
    step       one optimizer step (AdamW for the language models, SGD with momentum for
               the vision models): every parameter and buffer after it
    generate   (causal LMs) greedy `generate`, 6 new tokens, in eval mode

The reference process writes its model's initial state and every stage's result to a
.npz file; the test process loads that state into its own model and compares.
"""
from __future__ import annotations

import numpy as np

STAGES = ("forward", "backward", "step", "generate")
LANGUAGE_MODELS = ("gpt2", "llama", "bert")
VISION_MODELS = ("timm_resnet18", "timm_vit_tiny", "tv_resnet18", "tv_mobilenet_v3_small")
CAUSAL_LMS = ("gpt2", "llama")
LIBRARY = {"gpt2": "transformers", "llama": "transformers", "bert": "transformers",
           "timm_resnet18": "timm", "timm_vit_tiny": "timm", "tv_resnet18": "torchvision",
           "tv_mobilenet_v3_small": "torchvision"}


def stages_of(name: str) -> tuple[str, ...]:
    return STAGES if name in CAUSAL_LMS else STAGES[:3]


def need(*packages: str) -> None:
    """Skip the test, naming them, unless `packages` are installed (and PyTorch, the
    reference)."""
    import importlib.util

    import pytest
    lacking = [p for p in ("torch",) + packages if importlib.util.find_spec(p) is None]
    if lacking:
        pytest.skip(f"needs {', '.join(lacking)} (pip install -e '.[ecosystem,compare]')")


def define_torchvision_operators(torch) -> None:
    """torchvision 0.28 registers fake kernels for torchvision::nms and ::qnms at import,
    unguarded, on operators its C++ extension defines. That extension loads in neither
    process: PyPI's wheel is a CUDA build that does not load beside PyTorch's CPU build,
    and kiln loads no C++ extension (torch.ops.load_library raises OSError, which
    torchvision catches). So both processes define the two schemas, as the extension
    would, with no kernels: calling them fails in both."""
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:
        return
    for name in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{name}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError as e:  # defined already (by a test before this one)
            if "already" not in str(e) and "multiple times" not in str(e):
                raise


def build(name: str):
    """(model, inputs: dict of tensors, loss_fn(output) -> scalar tensor)."""
    import torch
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name in LANGUAGE_MODELS:
        ids = torch.from_numpy(rng.integers(0, 96, size=(2, 7)).astype(np.int64))
        model = _language_model(name)
        if name == "bert":
            labels = torch.from_numpy(np.array([0, 2], dtype=np.int64))
        else:
            labels = ids
        return model, {"input_ids": ids, "labels": labels}, lambda out: out.loss
    # the convolutional networks get 4 images of 64 x 64: their last batch norms then
    # average 16 values (with 2 of 32 x 32, 2: PyTorch's own float32 gradients are then
    # 1e-3 away from its float64 ones, and two float32 implementations as far apart)
    shape = (2, 3, 32, 32) if name == "timm_vit_tiny" else (4, 3, 64, 64)
    images = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    targets = torch.from_numpy(np.arange(shape[0], dtype=np.int64) % 5)
    model = _vision_model(name)
    return model, {"x": images}, lambda out: torch.nn.functional.cross_entropy(out, targets)


def _language_model(name: str):
    import transformers as hf
    common = dict(vocab_size=96, num_hidden_layers=2, num_attention_heads=4)
    if name == "gpt2":
        config = hf.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                               bos_token_id=1, eos_token_id=2)
        return hf.GPT2LMHeadModel(config)
    if name == "llama":
        config = hf.LlamaConfig(hidden_size=32, intermediate_size=64, num_key_value_heads=2,
                                max_position_embeddings=32, **common)
        return hf.LlamaForCausalLM(config)
    config = hf.BertConfig(hidden_size=32, intermediate_size=64, max_position_embeddings=32,
                           num_labels=3, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0, **common)
    return hf.BertForSequenceClassification(config)


def _vision_model(name: str):
    if name.startswith("timm_"):
        import timm
        if name == "timm_resnet18":
            return timm.create_model("resnet18", num_classes=5)
        return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8,
                                 num_classes=5)
    import torchvision
    if name == "tv_resnet18":
        # (zero_init_residual: each block starts as the identity, as timm's do, so that
        # float32 rounding is not amplified: see build)
        return torchvision.models.resnet18(num_classes=5, zero_init_residual=True)
    return torchvision.models.mobilenet_v3_small(num_classes=5, dropout=0.0)


def state(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def load_state(model, arrays: dict[str, np.ndarray]) -> None:
    import torch
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})


def optimizer_for(name: str, model):
    import torch
    if name in LANGUAGE_MODELS:
        return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


def run(name: str, upto: str, initial: dict[str, np.ndarray] | None = None) -> dict:
    """Build `name`, load `initial` (its state) if given, and run the stages up to `upto`;
    returns {"initial": state, "forward": {...}, "backward": {...}, ...} as numpy."""
    import torch
    model, inputs, loss_fn = build(name)
    if initial is not None:
        load_state(model, initial)
    results = {"initial": state(model)}
    model.train()
    out = model(**inputs)
    loss = loss_fn(out)
    main = out if isinstance(out, torch.Tensor) else out.logits
    results["forward"] = {"output": main.detach().numpy(), "loss": loss.detach().numpy()}
    if upto == "forward":
        return results
    loss.backward()
    results["backward"] = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
    if upto == "backward":
        return results
    optimizer_for(name, model).step()
    results["step"] = state(model)
    if upto == "step":
        return results
    model.eval()
    with torch.no_grad():
        generated = model.generate(inputs["input_ids"][:1, :4], max_new_tokens=6,
                                   do_sample=False, pad_token_id=0)
    results["generate"] = {"ids": generated.numpy()}
    return results


def flatten(results: dict) -> dict[str, np.ndarray]:
    return {f"{stage}/{k}": v for stage, values in results.items() for k, v in values.items()}


def unflatten(arrays) -> dict:
    results: dict = {}
    for key in arrays.files if hasattr(arrays, "files") else arrays:
        stage, _, k = key.partition("/")
        results.setdefault(stage, {})[k] = arrays[key]
    return results
