"""A tiny Stable Diffusion pipeline built from configs with random weights: nothing is downloaded.

diffusers' StableDiffusionPipeline with a small UNet2DConditionModel, AutoencoderKL and CLIPTextModel, a
DDIMScheduler and a CLIPTokenizer made from a small vocabulary and merges file written to a temporary folder;
no safety checker. Its images are 32 px (16 x 16 latents), and a call takes 2 denoising steps unless told
otherwise (diffusers' default is 50), so that AITune's quick start runs in seconds on a CPU. Needs the zoo extra
(pip install 'aitune-ray[zoo]').
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")   # configs only, never a download

import torch  # noqa: E402

SAMPLE_SIZE = 16   # latents; the images are twice that (two VAE blocks)
STEPS = 2          # denoising steps of a call that does not say


def _tiny_pipeline_class():
    from diffusers import StableDiffusionPipeline

    class TinyStableDiffusionPipeline(StableDiffusionPipeline):
        """diffusers' StableDiffusionPipeline, whose calls take STEPS denoising steps unless told otherwise."""

        def __call__(self, *args, num_inference_steps: int = STEPS, **kwargs):
            return super().__call__(*args, num_inference_steps=num_inference_steps, **kwargs)

    return TinyStableDiffusionPipeline


def _bytes_to_unicode() -> list[str]:
    """The 256 printable characters byte-level BPE stands bytes in for (GPT-2's table, as CLIP uses it)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_tokenizer_files(folder: Path) -> tuple[Path, Path]:
    """(vocab.json, merges.txt) of a CLIP tokenizer in folder: every byte alone and at a word's end, a few merges
    of common English pairs, and CLIP's start and end tokens."""
    symbols = _bytes_to_unicode()
    merges = [("t", "h"), ("th", "e</w>"), ("a", "n"), ("i", "n"), ("o", "n</w>"), ("e", "r"), ("a", "t")]
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    vocab_file, merges_file = folder / "vocab.json", folder / "merges.txt"
    vocab_file.write_text(json.dumps({token: i for i, token in enumerate(dict.fromkeys(vocab))}))
    merges_file.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab_file, merges_file


def make_pipeline(seed: int = 0, folder: str | Path | None = None):
    """The tiny StableDiffusionPipeline, the same weights for the same seed."""
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    vocab_file, merges_file = write_tokenizer_files(Path(folder or tempfile.mkdtemp(prefix="tiny-clip-")))
    tokenizer = CLIPTokenizer(str(vocab_file), str(merges_file), model_max_length=77)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(sample_size=SAMPLE_SIZE, in_channels=4, out_channels=4, layers_per_block=1,
                                    block_out_channels=(32, 64), norm_num_groups=32, cross_attention_dim=32,
                                    attention_head_dim=8, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                            layers_per_block=1, norm_num_groups=32, sample_size=SAMPLE_SIZE * 2)
        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=77, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = _tiny_pipeline_class()(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe
