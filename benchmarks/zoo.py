"""Which real models tune end to end, on which backends, here? Real architectures from transformers, diffusers,
timm and torchvision, built from their libraries' configs with random weights (nothing is downloaded), each
called as its users call it (keywords, ModelOutput, return_dict), through every backend that can run here.

    python benchmarks/zoo.py --out OUT/zoo.md                          # tiny configs, every model, CPU backends
    python benchmarks/zoo.py --models bert,gpt2 --backends jit,onnx     # a few
    python benchmarks/zoo.py --size full --dtype float16 --out OUT/zoo.md   # full-size configs on a GPU
    python benchmarks/zoo.py --list                                     # the models and backends

Per (model, backend), as a user would: wrap the model in ait.Module with OneBackendStrategy(backend), its
performance validation in DIAGNOSTIC mode (the speedup over eager is measured and reported, and the backend is
deployed whenever it builds correctly, so that the rest can be checked); ait.tune on calls at batch sizes 1 and
2 (call_as_given: each item one call, with its keywords as the user passes them); then
- build: ok, or its status and its error in one line;
- correct: the tuned module's output on a fresh batch against eager's, every tensor of the output structure
  (relative L2 error within the backend's tolerance) and the output's type (a ModelOutput stays one);
- round trip: ait.save, then ait.load into a freshly built model (same seed), whose outputs pass the same check
  against eager as the tuned module's (a backend that compiles again at load, Inductor's JIT on a GPU say, may
  pick other kernels: equal within the backend's tolerance, not bit for bit);
- speedup: the confirm session's median speedup over the recorded calls (a few rounds: information only).
Each (model, backend) runs in a child process of its own (--isolate, the default), so that a crash (a
segmentation fault in a compiled library, say) is a row of the table with the Python stack faulthandler printed,
not the end of the run.
Every failure is classified: "library" where the backend's own library raised it (its error is quoted), "here"
where this project's code did, or a wrong result it returned. The JSON (--out X.md writes X.json beside it) is a
record for benchmarks/results_table.py (benchmarks/README.md).

A library that is not installed, or cannot load here, marks its models "unavailable" with the reason. A
torchvision that cannot load beside this torch (PyPI's CUDA build beside a CPU-only torch) is made absent first
(examples/helpers.py), so that transformers and diffusers still import; timm needs torchvision.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import json
import logging
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))   # results_table.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # configs only, never a download
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402


def block_unloadable_torchvision() -> str | None:
    """The zoo's own guard, for machines whose pip pairs a CPU-only torch with PyPI's CUDA build of torchvision
    (the project's test extra installs neither timm nor torchvision for this reason).
    Where torchvision is installed but cannot load beside this torch (PyPI's CUDA build of torchvision beside
    a CPU-only torch: "operator torchvision::nms does not exist"), make it absent for this process, so that
    transformers and diffusers, which use it only where it is there, still import. Call it before importing them.
    Returns why torchvision is unusable here, or None where it loads or is not installed."""
    if "torchvision" in sys.modules:
        return _TORCHVISION_BLOCKED.get("why") if sys.modules["torchvision"] is None else None
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision  # noqa: F401
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to load makes it unusable
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision"] = None   # import torchvision now raises ImportError, as if not installed
        _TORCHVISION_BLOCKED["why"] = f"torchvision cannot load beside torch {torch.__version__}: " \
                                      f"{type(exc).__name__}: {exc}"
        return _TORCHVISION_BLOCKED["why"]


_TORCHVISION_BLOCKED: dict[str, str] = {}
TORCHVISION_PROBLEM = block_unloadable_torchvision()

import aitune_ray as ait  # noqa: E402
from aitune_ray.measure.correctness import compare_outputs  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402

logger = logging.getLogger("zoo")

BATCH_SIZES = (1, 2)
SEED = 0


# ----- the models ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ZooModel:
    """One architecture: its library, how to build it (size, seed) and how its users call it."""

    name: str
    library: str                  # the package that must import: transformers, diffusers, timm, torchvision
    what: str                     # the class, as its users know it
    build: Callable[[str], torch.nn.Module]
    inputs: Callable[[str, int, torch.Generator], dict]   # keyword inputs of one call at a batch size
    attention: bool = False       # it has attention that kernel selection may replace


def _ids(batch: int, length: int, vocab: int, gen: torch.Generator, mask: bool = True) -> dict:
    ids = torch.randint(0, vocab, (batch, length), generator=gen)
    out = {"input_ids": ids}
    if mask:
        attention = torch.ones(batch, length, dtype=torch.int64)
        attention[:, length - length // 4:] = 0   # the last quarter is padding
        out["attention_mask"] = attention
    return out


def _len(size: str) -> int:
    return 16 if size == "tiny" else 128


def _tf(size: str, tiny: dict, full: dict) -> dict:
    return tiny if size == "tiny" else full


VOCAB = {"tiny": 256, "full": 30522}


def _bert(size):
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=VOCAB[size], **_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128), {})))


def _distilbert(size):
    from transformers import DistilBertConfig, DistilBertModel

    return DistilBertModel(DistilBertConfig(vocab_size=VOCAB[size], **_tf(size, dict(
        dim=64, n_layers=2, n_heads=2, hidden_dim=128), {})))


def _roberta_cls(size):
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return RobertaForSequenceClassification(RobertaConfig(vocab_size=VOCAB[size], num_labels=3, **_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        max_position_embeddings=64), {})))


def _bert_cls(size):
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(vocab_size=VOCAB[size], num_labels=2, **_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128), {})))


def _gpt2(size):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB[size], **_tf(size, dict(
        n_embd=64, n_layer=2, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0), {})))


def _llama(size):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB[size], **_tf(size, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64), dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                          num_attention_heads=16, num_key_value_heads=4))))


def _qwen2(size):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB[size], **_tf(size, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64), dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=8,
                                          num_attention_heads=14, num_key_value_heads=2))))


def _t5_encoder(size):
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=VOCAB[size], **_tf(size, dict(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4), {})))


def _vit(size):
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig(**_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=32,
        patch_size=8), {})), add_pooling_layer=True)


def _deberta(size):
    from transformers import DebertaV2Config, DebertaV2Model

    return DebertaV2Model(DebertaV2Config(vocab_size=VOCAB[size], **_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        max_position_embeddings=64), {})))


def _swin(size):
    from transformers import SwinConfig, SwinModel

    return SwinModel(SwinConfig(**_tf(size, dict(
        image_size=32, patch_size=2, embed_dim=16, depths=(1, 1), num_heads=(2, 2), window_size=4), {})))


def _convnext(size):
    from transformers import ConvNextConfig, ConvNextModel

    return ConvNextModel(ConvNextConfig(**_tf(size, dict(
        hidden_sizes=(16, 32), depths=(1, 1), num_stages=2, image_size=32), {})))


def _whisper_encoder(size):
    from transformers import WhisperConfig, WhisperModel

    config = WhisperConfig(**_tf(size, dict(
        d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128, decoder_layers=1,
        decoder_attention_heads=2, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=32,
        vocab_size=VOCAB[size], pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0), {}))
    return WhisperModel(config).get_encoder()


def _wav2vec2(size):
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return Wav2Vec2Model(Wav2Vec2Config(**_tf(size, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4), {})))


def _clip_text(size):
    from transformers import CLIPTextConfig, CLIPTextModel

    return CLIPTextModel(CLIPTextConfig(vocab_size=VOCAB[size], **_tf(size, dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=77, bos_token_id=0, eos_token_id=2), {})))


def _unet(size):
    from diffusers import UNet2DConditionModel

    if size == "tiny":
        return UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                    block_out_channels=(32, 64), norm_num_groups=32, cross_attention_dim=32,
                                    attention_head_dim=8, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
    return UNet2DConditionModel(sample_size=64, cross_attention_dim=768)   # Stable Diffusion 1.5's shape


def _dit(size):
    from diffusers import DiTTransformer2DModel

    if size == "tiny":
        return DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                                     num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10,
                                     norm_num_groups=32)
    return DiTTransformer2DModel(sample_size=32)   # DiT-XL/2 at 256 px


def _pixart(size):
    from diffusers import PixArtTransformer2DModel

    if size == "tiny":
        return PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
                                        num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=32,
                                        caption_channels=32)
    return PixArtTransformer2DModel(sample_size=64)


def _sd3(size):
    from diffusers import SD3Transformer2DModel

    if size == "tiny":
        return SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
                                     num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
                                     pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16)
    return SD3Transformer2DModel(sample_size=64, num_layers=12)


def _vae_decoder(size):
    from diffusers import AutoencoderKL

    if size == "tiny":
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                            layers_per_block=1, norm_num_groups=32, sample_size=32)
    else:
        vae = AutoencoderKL(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                            up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, sample_size=512)
    return vae.decoder   # what vae.decode(latents) runs after post_quant_conv


def _timm(name, **kwargs):
    def build(size):
        import timm

        return timm.create_model(name, pretrained=False, **(kwargs if size == "tiny" else {}))
    return build


def _tv(name):
    def build(size):
        import torchvision

        return getattr(torchvision.models, name)(weights=None)
    return build


def _fpn(size):
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    return resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=0)


def _image(size_px: int, channels: int = 3, key: str = "pixel_values"):
    def inputs(size, batch, gen):
        return {key: torch.randn(batch, channels, size_px if size == "tiny" else 224,
                                 size_px if size == "tiny" else 224, generator=gen)}
    return inputs


def _text(mask: bool = True, **extra):
    def inputs(size, batch, gen):
        return {**_ids(batch, _len(size), VOCAB[size], gen, mask), **extra}
    return inputs


def _latents(size, batch, gen, channels=4):
    side = 8 if size == "tiny" else 64
    return torch.randn(batch, channels, side, side, generator=gen)


def _unet_inputs(size, batch, gen):
    return {"sample": _latents(size, batch, gen), "timestep": torch.tensor(10),
            "encoder_hidden_states": torch.randn(batch, 8 if size == "tiny" else 77, 32 if size == "tiny" else 768,
                                                 generator=gen)}


def _dit_inputs(size, batch, gen):
    return {"hidden_states": _latents(size, batch, gen) if size == "tiny" else torch.randn(batch, 4, 32, 32,
                                                                                           generator=gen),
            "timestep": torch.tensor([10] * batch), "class_labels": torch.randint(0, 10, (batch,), generator=gen)}


def _pixart_inputs(size, batch, gen):
    width = 32 if size == "tiny" else 4096
    return {"hidden_states": _latents(size, batch, gen), "encoder_hidden_states": torch.randn(batch, 8, width,
                                                                                              generator=gen),
            "timestep": torch.tensor([10] * batch),
            "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}


def _sd3_inputs(size, batch, gen):
    tiny = size == "tiny"
    return {"hidden_states": _latents(size, batch, gen, 4 if tiny else 16),
            "encoder_hidden_states": torch.randn(batch, 8, 32 if tiny else 4096, generator=gen),
            "pooled_projections": torch.randn(batch, 16 if tiny else 2048, generator=gen),
            "timestep": torch.tensor([10] * batch)}


def _vae_inputs(size, batch, gen):
    return {"sample": _latents(size, batch, gen)}


def _whisper_inputs(size, batch, gen):
    tiny = size == "tiny"
    return {"input_features": torch.randn(batch, 16 if tiny else 80, 64 if tiny else 3000, generator=gen)}


def _wav2vec2_inputs(size, batch, gen):
    return {"input_values": torch.randn(batch, 1600 if size == "tiny" else 16000, generator=gen)}


def _clip_inputs(size, batch, gen):
    return _ids(batch, 77 if size == "full" else 16, VOCAB[size], gen, mask=True)


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("bert", "transformers", "BertModel", _bert, _text(), attention=True),
    ZooModel("distilbert", "transformers", "DistilBertModel", _distilbert, _text(), attention=True),
    ZooModel("roberta-cls", "transformers", "RobertaForSequenceClassification", _roberta_cls, _text(),
             attention=True),
    ZooModel("bert-cls", "transformers", "BertForSequenceClassification", _bert_cls, _text(return_dict=True),
             attention=True),
    ZooModel("gpt2", "transformers", "GPT2LMHeadModel", _gpt2, _text(use_cache=False), attention=True),
    ZooModel("llama", "transformers", "LlamaForCausalLM", _llama, _text(use_cache=False), attention=True),
    ZooModel("qwen2", "transformers", "Qwen2ForCausalLM", _qwen2, _text(use_cache=False), attention=True),
    ZooModel("t5-encoder", "transformers", "T5EncoderModel", _t5_encoder, _text(), attention=True),
    ZooModel("vit", "transformers", "ViTModel", _vit, _image(32), attention=True),
    ZooModel("deberta-v2", "transformers", "DebertaV2Model", _deberta, _text(), attention=True),
    ZooModel("swin", "transformers", "SwinModel", _swin, _image(32), attention=True),
    ZooModel("convnext", "transformers", "ConvNextModel", _convnext, _image(32)),
    ZooModel("whisper-encoder", "transformers", "WhisperEncoder", _whisper_encoder, _whisper_inputs,
             attention=True),
    ZooModel("wav2vec2", "transformers", "Wav2Vec2Model", _wav2vec2, _wav2vec2_inputs, attention=True),
    ZooModel("clip-text", "transformers", "CLIPTextModel", _clip_text, _clip_inputs, attention=True),
    ZooModel("unet", "diffusers", "UNet2DConditionModel", _unet, _unet_inputs, attention=True),
    ZooModel("dit", "diffusers", "DiTTransformer2DModel", _dit, _dit_inputs, attention=True),
    ZooModel("pixart", "diffusers", "PixArtTransformer2DModel", _pixart, _pixart_inputs, attention=True),
    ZooModel("sd3", "diffusers", "SD3Transformer2DModel", _sd3, _sd3_inputs, attention=True),
    ZooModel("vae-decoder", "diffusers", "AutoencoderKL.decoder", _vae_decoder, _vae_inputs, attention=True),
    ZooModel("timm-resnet", "timm", "timm resnet10t", _timm("resnet10t"), _image(32, key="x")),
    ZooModel("timm-convnext", "timm", "timm convnext_atto", _timm("convnext_atto"), _image(32, key="x")),
    ZooModel("timm-vit", "timm", "timm vit_tiny_patch16_224", _timm("vit_tiny_patch16_224", img_size=32,
                                                                   patch_size=8, depth=2),
             _image(32, key="x"), attention=True),
    ZooModel("tv-resnet18", "torchvision", "torchvision resnet18", _tv("resnet18"), _image(32, key="x")),
    ZooModel("tv-mobilenet-v3", "torchvision", "torchvision mobilenet_v3_small", _tv("mobilenet_v3_small"),
             _image(32, key="x")),
    ZooModel("tv-efficientnet-b0", "torchvision", "torchvision efficientnet_b0", _tv("efficientnet_b0"),
             _image(32, key="x")),
    ZooModel("tv-fpn", "torchvision", "torchvision resnet_fpn_backbone (resnet18)", _fpn, _image(64, key="x")),
]}


def make_model(entry: ZooModel, size: str, dtype: torch.dtype, device: str, seed: int = SEED) -> torch.nn.Module:
    """The model built from its config with the random weights of seed, in eval mode, on device, in dtype."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = entry.build(size)
    return model.eval().to(device, dtype)


def _to(value: Any, device: str, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, dtype) if value.is_floating_point() else value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    return value


def make_calls(entry: ZooModel, size: str, dtype: torch.dtype, device: str, seed: int = 1,
               batch_sizes=BATCH_SIZES) -> list[dict]:
    """One keyword call per batch size (the dataset of call_as_given), as the model's users call it."""
    gen = torch.Generator().manual_seed(seed)
    return [_to(entry.inputs(size, bs, gen), device, dtype) for bs in batch_sizes]


def library_problem(library: str) -> str | None:
    """Why the library cannot be used here, or None."""
    if library == "torchvision" and TORCHVISION_PROBLEM:
        return TORCHVISION_PROBLEM
    if library == "timm" and TORCHVISION_PROBLEM:
        return f"timm imports torchvision, which is unusable here ({TORCHVISION_PROBLEM})"
    try:
        importlib.import_module(library)
    except Exception as exc:  # noqa: BLE001 - any failure to import makes it unavailable
        return f"{library} does not import: {type(exc).__name__}: {exc}"[:300]
    return None


# ----- the backends -------------------------------------------------------------------------------------------

def _backends(gpu: bool) -> dict[str, Callable]:
    from aitune_ray.backend import (KernelSelectorBackend, ONNXRuntimeBackend, TorchAOBackend,
                                    TorchAOBackendConfig, TorchEagerBackend, TorchInductorAotBackend,
                                    TorchInductorJitBackend)

    return {
        "jit": TorchInductorJitBackend,
        "aot": TorchInductorAotBackend,
        "onnx": ONNXRuntimeBackend,
        "ao-int8wo": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")),
        # on the CPU the kernel plan is made in front of eager, which keeps the run short; Inductor on a GPU
        "kernels": (KernelSelectorBackend if gpu else
                    lambda: KernelSelectorBackend(delegate_backend=TorchEagerBackend())),
    }


BACKEND_NAMES = ("jit", "aot", "onnx", "ao-int8wo", "kernels")
#: The libraries whose frames mark an error as the backend's own library's ("library"), by backend.
LIBRARY_FRAMES = ("torch/_dynamo", "torch/_inductor", "torch/export", "torch/_export", "torch/fx", "torch/onnx",
                  "onnxscript", "onnx/", "onnxruntime", "torchao", "torch/_subclasses", "torch/_functorch",
                  "torch/_higher_order_ops", "torch/_library", "torch/_ops.py", "torch/_prims")


def backend_problem(backend: str, device: str) -> str | None:
    """Why the backend cannot run on device here (its library's build lacks the device), or None."""
    if backend == "onnx" and device.startswith("cuda"):
        try:
            import onnxruntime
        except Exception as exc:  # noqa: BLE001 - any failure to import makes it unavailable
            return f"onnxruntime does not import: {type(exc).__name__}: {exc}"[:300]
        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return (f"this onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider "
                    f"({', '.join(onnxruntime.get_available_providers())}): the onnx-gpu extra brings one")
    return None


def backends_for(entry: ZooModel, names) -> list[str]:
    """The backends of names that apply to the model: kernel selection only where it has attention."""
    return [n for n in names if n != "kernels" or entry.attention]


# ----- checking one (model, backend) ----------------------------------------------------------------------------

def same_structure(out: Any, ref: Any, path: str = "output") -> str:
    """"" where out has ref's types all the way down (a ModelOutput stays that ModelOutput, a tuple a tuple),
    else where and how it differs."""
    if type(out) is not type(ref):
        return f"{path} is a {type(out).__name__}, eager returns a {type(ref).__name__}"
    if isinstance(ref, dict):
        if list(out) != list(ref):
            return f"{path} has keys {list(out)}, eager {list(ref)}"
        return next((w for k in ref if (w := same_structure(out[k], ref[k], f"{path}[{k!r}]"))), "")
    if isinstance(ref, (tuple, list)):
        if len(out) != len(ref):
            return f"{path} holds {len(out)} items, eager {len(ref)}"
        return next((w for i, (o, r) in enumerate(zip(out, ref)) if (w := same_structure(o, r, f"{path}[{i}]"))),
                    "")
    return ""


def check_outputs(out: Any, ref: Any, tolerance: float | None = None) -> tuple[bool, str, float]:
    """(passed, why not, worst relative L2 error): out against eager's ref, type and every tensor."""
    why = same_structure(out, ref)
    report = compare_outputs([(out, ref)], tolerance)
    if why:
        return False, why, report.max_error
    return report.passed, report.reason if not report.passed else "", report.max_error


def _one_line(text: str, limit: int = 500) -> str:
    """text on one line; a long one keeps its start and its end (where an exporter's root cause usually is)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit // 3] + " ... " + text[-(limit - limit // 3 - 5):]


def where_raised(exc: BaseException | None) -> str:
    """file:line of the innermost frame that raised exc (its cause's where it has one), under site-packages or
    this repository; "" without one."""
    while exc is not None and exc.__cause__ is not None:
        exc = exc.__cause__
    if exc is None or exc.__traceback__ is None:
        return ""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    path = frame.filename
    for marker in ("site-packages/", str(REPO) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{frame.lineno}"


#: Errors read once and traced to their cause: (a piece of the error, whose it is, why). A library may raise an
#: error that this project's call provoked; these say so where the frame alone would blame the library.
KNOWN = (
    ("Must provide a tree_name when there might be a mismatch", "here",
     "a non-tensor keyword that forward takes through **kwargs (transformers 5's return_dict) reached torch.export "
     "with dynamic shapes, which cannot mark a dict holding a bool; every exporter must export "
     "backend/flat_call.py's tensors-only wrapper"),
    ("Detected mismatch between the structure of `inputs` and `dynamic_shapes`", "here",
     "dynamic_shapes given for the module's own forward, where a keyword taken through **kwargs (transformers 5's "
     "return_dict) is one dict; every exporter must export backend/flat_call.py's tensors-only wrapper, its "
     "dynamic shapes keyed by the wrapper's parameter"),
    ("must be 1 instead of", "here",
     "a squeeze of an axis whose size is not 1 (a no-op in PyTorch) exported as an ONNX Squeeze, which ONNX "
     "Runtime refuses; onnx_export.noop_squeezes_to_identity makes it an Identity"),
    ("Failed to convert 'dynamic_axes' to 'dynamic_shapes'", "here",
     "onnx_export.export_onnx gives the dynamo exporter dynamic_axes for a call with non-tensor keywords "
     "(use_cache=False, return_dict, None), which torch.onnx cannot turn into dynamic_shapes"),
    ("is a dict, eager returns a", "here",
     "ONNX Runtime's outputs are rebuilt as a plain dict, not the ModelOutput the model returns"),
)


def known(error: str) -> tuple[str, str] | None:
    """(whose, why) for an error traced before, else None."""
    return next(((whose, why) for piece, whose, why in KNOWN if piece in error), None)


def classify(where: str, error: str) -> str:
    """"library" where the backend's own library raised the error, else "here" (this project's code, or a
    wrong result it returned); an error traced before (KNOWN) is what its tracing found."""
    if known(error):
        return known(error)[0]
    if where and any(part in where for part in LIBRARY_FRAMES):
        return "library"
    if where.startswith(("transformers/", "diffusers/", "timm/", "torchvision/")) and "aitune_ray" not in error:
        return "library"   # the model's own code, as the backend's tracer or exporter ran it
    return "here"


def call(model, item: dict):
    return model(**item)


def run_one(entry: ZooModel, backend: str, size: str = "tiny", device: str = "cpu",
            dtype: torch.dtype = torch.float32, rounds: int = 5, workdir: Path | None = None) -> dict:
    """Tune entry with one backend and check it: a row of the zoo (see the module docstring)."""
    factory = _backends(device.startswith("cuda"))[backend]
    row: dict[str, Any] = {"model": entry.name, "library": entry.library, "what": entry.what, "backend": backend,
                           "build": "", "error": "", "where": "", "failure": "", "correct": None,
                           "correct_error": None, "round_trip": None, "speedup": None, "decision": "", "seconds": 0.0}
    started = time.perf_counter()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="zoo-"))
    quick = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=20, max_seconds=0.2, latency_runs=0)
    strategy = ait.OneBackendStrategy(factory(), measure_config=quick, deploy_check_rounds=0)
    strategy.enable_performance_validation("diagnostic")
    model = make_model(entry, size, dtype, device)
    calls = make_calls(entry, size, dtype, device)
    check = make_calls(entry, size, dtype, device, seed=2, batch_sizes=(2,))[0]
    with torch.no_grad():
        eager = call(model, check)
    wrapped = ait.Module(model, entry.name, strategy=strategy)
    try:
        report = ait.tune(wrapped, calls, device=device, call_as_given=True,
                          executor=ait.InlineExecutor(remeasure_rounds=rounds))
        module = report.modules[0] if report.modules else wrapped.report
        result = module.results[0] if module is not None and module.results else None
        row["decision"] = _one_line(module.decision if module is not None else report.failures.get(entry.name, ""))
        if result is None or not result.ok:
            exc = getattr(result, "exception", None)
            error = (result.error if result is not None else report.failures.get(entry.name, "")) or "no result"
            row.update(build=result.status if result is not None else "failed", error=_one_line(error),
                       where=where_raised(exc))
            row["failure"] = classify(row["where"], error)
            if result is not None and result.status == "rejected":
                row.update(build="ok", correct=False, correct_error=(result.correctness or {}).get("max_error"))
            return row
        row["build"] = "ok"
        row["speedup"] = module.speedups.get(result.key)
        tolerance = (result.correctness or {}).get("tolerance") or None
        with torch.no_grad():
            tuned = call(wrapped, check)
        row["correct"], why, row["correct_error"] = check_outputs(tuned, eager, tolerance)
        if not row["correct"]:
            row.update(error=_one_line(why), failure="here", where="the tuned module's output")
            return row
        row["round_trip"], why = round_trip(entry, wrapped, check, eager, tolerance, size, dtype, device, workdir)
        if not row["round_trip"]:
            row.update(error=_one_line(why), failure="here" if "library:" not in why else "library")
    except Exception as exc:  # noqa: BLE001 - a row of the table, never the end of the zoo
        row.update(build=row["build"] or "failed", error=_one_line(f"{type(exc).__name__}: {exc}"),
                   where=where_raised(exc))
        row["failure"] = classify(row["where"], row["error"])
    finally:
        row["seconds"] = round(time.perf_counter() - started, 1)
        row["cause"] = (known(row["error"]) or ("", ""))[1]
        del wrapped, model
        gc.collect()
    return row


def round_trip(entry: ZooModel, wrapped, check: dict, eager, tolerance: float | None, size: str, dtype,
               device: str, workdir: Path) -> tuple[bool, str]:
    """ait.save, ait.load into a freshly built model (same seed): (its outputs pass the check against eager's
    that the tuned ones passed, why not)."""
    path = workdir / f"{entry.name}.ait"
    try:
        ait.save(wrapped, path)
        fresh = ait.Module(make_model(entry, size, dtype, device), entry.name)
        # the file was written just now by this process: its AOTInductor package may load
        fresh = ait.load(fresh, path, allow_native_code=True)
        if fresh.backend is None:
            return False, "the loaded module has no backend (it runs eager)"
        with torch.no_grad():
            again = call(fresh, check)
    except Exception as exc:  # noqa: BLE001 - the round trip's result
        where = where_raised(exc)
        kind = "library: " if classify(where, str(exc)) == "library" else ""
        return False, f"{kind}{type(exc).__name__}: {exc} (at {where})"
    passed, why, _ = check_outputs(again, eager, tolerance)
    return passed, (f"after load: {why}" if why else "")


# ----- the whole zoo ----------------------------------------------------------------------------------------------

def run_isolated(entry: ZooModel, backend: str, size: str, device: str, dtype: torch.dtype, rounds: int,
                 timeout_s: float) -> dict:
    """run_one in a child process (python -X faulthandler this file --one ...): its row, or a row saying how the
    child died, with the end of the Python stack faulthandler printed."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="zoo-one-") as tmp:
        out = Path(tmp) / "row.json"
        command = [sys.executable, "-X", "faulthandler", __file__, "--one", entry.name, backend, str(out),
                   "--size", size, "--device", device, "--dtype", str(dtype).removeprefix("torch."),
                   "--rounds", str(rounds), "--timeout", str(timeout_s)]
        err = Path(tmp) / "stderr.txt"
        started = time.perf_counter()
        with open(err, "wb") as stderr_file:
            try:
                code = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=stderr_file,
                                      timeout=timeout_s).returncode
            except subprocess.TimeoutExpired:
                code = None
        stderr = err.read_text(errors="replace")
        if code == 0 and out.exists():
            return json.loads(out.read_text())
    how = f"timed out after {timeout_s:.0f} s" if code is None or "Timeout (" in stderr else (
        f"killed by signal {-code}" if code < 0 else f"exit status {code}")
    stack = crashed_stack(stderr)
    where = ""
    if stack:   # faulthandler lists the innermost frame first
        where = stack[0].split('"')[1].split("site-packages/")[-1] + ":" + stack[0].split("line ")[-1].split()[0]
    ours = next((line for line in stack if "aitune_ray/" in line), "")
    error = f"the run's process died: {how}" + (f" in {stack[0]}" if stack else "") + (f", under {ours}" if ours else "")
    return {"model": entry.name, "library": entry.library, "what": entry.what, "backend": backend,
            "build": "crashed", "error": _one_line(error), "where": where, "failure": classify(where, error),
            "correct": None, "correct_error": None, "round_trip": None, "speedup": None, "decision": "",
            "seconds": round(time.perf_counter() - started, 1), "cause": "",
            "stack": [_one_line(line, 200) for line in stack[:40]]}


def crashed_stack(stderr: str) -> list[str]:
    """The frames of the run's own thread (the one whose stack passes through this file), innermost first, from
    what faulthandler printed at a crash or a timeout; else those of the thread it names current; else every
    frame it printed."""
    blocks, block = [], None
    for line in (line.strip() for line in stderr.splitlines()):
        if line.startswith(("Current thread", "Thread 0x")):
            block = [line]
            blocks.append(block)
        elif block is not None and line.startswith("File "):
            block.append(line)
        else:
            block = None
    ours = [b for b in blocks if any("zoo.py" in line for line in b[1:])]
    current = [b for b in blocks if b[0].startswith("Current thread")]
    chosen = (ours or current or [None])[0]
    if chosen is None:
        return [line for line in stderr.splitlines() if line.strip().startswith("File ")]
    return chosen[1:]


def run_zoo(models, backends, size: str = "tiny", device: str = "cpu", dtype: torch.dtype = torch.float32,
            rounds: int = 5, progress: Callable[[dict], None] | None = None, isolate: bool = False,
            timeout_s: float = 900.0) -> list[dict]:
    """A row per (model, backend) of models x backends; a model whose library is unusable here gets one row."""
    rows = []
    for name in models:
        entry = MODELS[name]
        problem = library_problem(entry.library)
        if problem:
            rows.append({"model": entry.name, "library": entry.library, "what": entry.what, "backend": "-",
                         "build": "unavailable", "error": _one_line(problem), "failure": "library"})
            if progress:
                progress(rows[-1])
            continue
        for backend in backends_for(entry, backends):
            logger.info("zoo: %s on %s", entry.name, backend)
            if (problem := backend_problem(backend, device)):
                rows.append({"model": entry.name, "library": entry.library, "what": entry.what, "backend": backend,
                             "build": "unavailable", "error": _one_line(problem), "failure": "library"})
            elif isolate:
                rows.append(run_isolated(entry, backend, size, device, dtype, rounds, timeout_s))
            else:
                rows.append(run_one(entry, backend, size, device, dtype, rounds))
            if progress:
                progress(rows[-1])
    return rows


def totals(rows: list[dict]) -> dict:
    """Pass counts: models, runs, builds, correct, round trips; by backend too."""
    runs = [r for r in rows if r["build"] != "unavailable"]

    def count(rs):
        return {"runs": len(rs), "built": sum(r["build"] == "ok" for r in rs),
                "correct": sum(bool(r.get("correct")) for r in rs),
                "round_trip": sum(bool(r.get("round_trip")) for r in rs),
                "failures_library": sum(r.get("failure") == "library" for r in rs),
                "failures_here": sum(r.get("failure") == "here" for r in rs)}
    return {"models": len({r["model"] for r in rows}),
            "unavailable": sorted({r["model"] for r in rows if r["build"] == "unavailable" and r["backend"] == "-"}),
            "unavailable_backends": sorted({f"{r['model']} on {r['backend']}" for r in rows
                                            if r["build"] == "unavailable" and r["backend"] != "-"}),
            "failures_unknown": sum(r.get("failure") == "unknown" for r in runs),
            **count(runs), "by_backend": {b: count([r for r in runs if r["backend"] == b])
                                           for b in dict.fromkeys(r["backend"] for r in runs)}}


def markdown(rows: list[dict]) -> str:
    lines = ["| model | library | backend | build | correct | round trip | speedup | failure | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = r.get("speedup")
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in [
            r["model"], r["library"], r["backend"], r["build"], _yes(r.get("correct")), _yes(r.get("round_trip")),
            f"{speed:.2f}x" if isinstance(speed, float) and math.isfinite(speed) else "-", r.get("failure") or "",
            (r.get("error") or "") + (f" ({r['where']})" if r.get("where") else "")]) + " |")
    t = totals(rows)
    lines += ["", f"{t['models']} models ({len(t['unavailable'])} unavailable here), {t['runs']} runs: "
              f"{t['built']} built, {t['correct']} correct, {t['round_trip']} round trips; failures: "
              f"{t['failures_library']} the backend's library, {t['failures_here']} here"]
    return "\n".join(lines) + "\n"


def _yes(value) -> str:
    return "-" if value is None else "yes" if value else "NO"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma list (default: all)")
    parser.add_argument("--backends", default=",".join(BACKEND_NAMES), help="comma list (default: all)")
    parser.add_argument("--size", choices=["tiny", "full"], default="tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rounds", type=int, default=5, help="confirm-session rounds per batch size")
    parser.add_argument("--out", default=None, help="write the markdown table (and its JSON record beside it)")
    parser.add_argument("--list", action="store_true", help="print the models and backends, and stop")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                        help="each (model, backend) in a child process of its own (default: on)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one (model, backend) may take")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "BACKEND", "ROW_JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--combine", nargs="+", metavar="JSON",
                        help="make one table (written at --out) of the records of runs made in parts, and stop; "
                             "a later part's row for a (model, backend) replaces an earlier one's")
    args = parser.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)
    if args.one:   # a child of run_isolated: one row, written as JSON
        logging.basicConfig(level=logging.ERROR)
        name, backend, out = args.one
        import faulthandler

        faulthandler.dump_traceback_later(max(args.timeout - 20, 1), exit=True)   # where a stuck run was
        row = run_one(MODELS[name], backend, args.size, args.device, getattr(torch, args.dtype), args.rounds)
        Path(out).write_text(json.dumps(row, default=str))
        return 0
    if args.list:
        for entry in MODELS.values():
            print(f"{entry.name:20} {entry.library:12} {entry.what}"
                  + (f"  [unavailable: {p}]" if (p := library_problem(entry.library)) else ""))
        print("backends:", ", ".join(BACKEND_NAMES))
        return 0
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(name)s %(message)s")   # libraries: errors
    logger.setLevel(logging.INFO)   # the zoo's own lines
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS] + [b for b in args.backends.split(",") if b not in BACKEND_NAMES]
    if unknown:
        parser.error(f"unknown model or backend: {', '.join(unknown)} (--list)")
    dtype = getattr(torch, args.dtype)

    from results_table import publish, record_of

    done: list[dict] = []

    def data(rows, complete: bool) -> dict:
        return {"size": args.size, "device": args.device, "dtype": args.dtype, "complete": complete, "rows": rows,
                "totals": totals(rows), "versions": versions()}

    def progress(row):
        print(markdown([row]).splitlines()[2], flush=True)
        done.append(row)
        if args.out:   # the record so far, so that a run stopped part-way still says what it found
            path = Path(args.out).with_suffix(".partial.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record_of(data(done, False), "zoo"), indent=1, default=str) + "\n")

    rows = run_zoo(models, [b for b in args.backends.split(",") if b], args.size, args.device, dtype, args.rounds,
                   progress, isolate=args.isolate, timeout_s=args.timeout)
    publish(markdown(rows), args.out, data(rows, True), benchmark="zoo")
    return 0


def combine(paths: list[str], out: str | None) -> int:
    """One record of several parts' records (the same size, device and dtype; each part its own models)."""
    from results_table import publish

    parts = [json.loads(Path(p).read_text())["result"] for p in paths]
    kinds = {(p["size"], p["device"], p["dtype"]) for p in parts}
    if len(kinds) != 1:
        raise SystemExit(f"error: the parts differ in size, device or dtype: {sorted(kinds)}")
    # a (model, backend) run again in a later part (after a fix) replaces its earlier row, in its place
    latest = {(row["model"], row["backend"]): row for part in parts for row in part["rows"]}
    order = {name: i for i, name in enumerate(MODELS)}
    rows = sorted(latest.values(), key=lambda r: (order.get(r["model"], len(order)),
                                                  _backend_order(r["backend"])))
    first = parts[0]
    data = {"size": first["size"], "device": first["device"], "dtype": first["dtype"],
            "complete": all(p["complete"] for p in parts) or covers_the_zoo(rows), "rows": rows,
            "totals": totals(rows),
            "versions": first["versions"], "parts": len(parts)}
    publish(markdown(rows), out, data, benchmark="zoo")
    return 0


def covers_the_zoo(rows: list[dict]) -> bool:
    """Every model of the zoo has a row for each of its backends, or one saying it is unavailable."""
    have = {(r["model"], r["backend"]) for r in rows}
    return all((name, "-") in have or all((name, b) in have for b in backends_for(entry, BACKEND_NAMES))
               for name, entry in MODELS.items())


def _backend_order(backend: str) -> int:
    return BACKEND_NAMES.index(backend) if backend in BACKEND_NAMES else len(BACKEND_NAMES)


def versions() -> dict:
    out = {}
    for name in ("torch", "transformers", "diffusers", "timm", "torchvision", "onnxruntime", "onnx", "torchao"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # noqa: BLE001 - not installed
            out[name] = None
    return out


if __name__ == "__main__":
    raise SystemExit(main())
