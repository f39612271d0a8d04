"""`GGUFQuantizer`: transformers' quantizer hooks for GGUF checkpoints kept in ggml blocks.

Hook order on a GGUF load (transformers 5.23/5.24): `read_header` -> `update_dtype` ->
`_process_model_before_weight_loading` (meta device: swap modules) -> `get_state_dict` ->
`update_weight_conversions` -> `get_new_dtype` per tensor -> `_process_model_after_weight_loading`.
"""
from __future__ import annotations

import logging
import time

import torch
from transformers.quantizers.base import HfQuantizer

from . import archs
from .archs.conversions import NormPlusOne, Quantize, Unpack
from .config import GgufQuantizeConfig
from .fusion import fuse_siblings, unshared_state_dict
from .ggml.dequant import DEQUANTIZABLE_TYPES
from .ggml.types import ggml_type
from .gguf_io.hub import fetch_missing_shards
from .gguf_io.reader import GgufError, GgufFile, read_gguf
from .mixes import model_types
from .packing import PackingReport, swap_modules, unpack_modules

__all__ = ["GGUFQuantizer"]

logger = logging.getLogger("gguf_quant")


class GGUFQuantizer(HfQuantizer):
    """Loads GGUF checkpoints with every quantized weight left in its ggml blocks."""

    requires_calibration = False

    def __init__(self, quantization_config, **kwargs):
        if not isinstance(quantization_config, GgufQuantizeConfig):
            # transformers builds its own `GgufConfig` for `from_pretrained(..., gguf_file=...)`.
            quantization_config = GgufQuantizeConfig(
                gguf_file=getattr(quantization_config, "gguf_file", None),
                dequantize=getattr(quantization_config, "dequantize", False),
            )
        super().__init__(quantization_config, **kwargs)
        self.gguf: GgufFile | None = None
        self.legacy = False  # an architecture we do not map: transformers' own unpacking path
        self.dtype: torch.dtype | None = None
        self.transforms: list = []
        self.report = PackingReport()
        self.to_quantize: dict[str, str] = {}  # parameter -> ggml type, for quantizing on load
        # A gpt-oss checkpoint with openai's MXFP4 experts (marked by `_merge_checkpoint_config`):
        # its experts are repacked or requantized by our converters, so it is no pre-quantized load.
        self.mxfp4_experts = vars(quantization_config).pop("checkpoint_quant_method", None) == "mxfp4"
        if self.mxfp4_experts:
            self.pre_quantized = False
        self._started = time.perf_counter()

    # --- reading the file ---------------------------------------------------------------------

    def read_header(self, gguf_file: str) -> None:
        fetch_missing_shards(gguf_file)
        self.gguf = read_gguf(gguf_file)
        self.pre_quantized = True
        if self.quantization_config.quant_type:
            raise ValueError(
                f"{gguf_file}: quant_type={self.quantization_config.quant_type!r} asks to quantize a float "
                "checkpoint while it loads, but this is already a GGUF file; drop quant_type."
            )
        # A type nothing here can compute with fails now, by name, not at the first forward.
        for name, info in self.gguf.tensors.items():
            if info.type.name not in DEQUANTIZABLE_TYPES:
                raise GgufError(f"{info.path}: tensor {name!r} has ggml type {info.type.name}, which gguf_quant cannot compute with")
        arch = self.gguf.architecture
        if not archs.is_supported(arch):
            self.legacy = True
            logger.warning(
                f"gguf_quant: architecture {arch!r} of {gguf_file} has no packed mapping yet; falling back to "
                "transformers' loader, which unpacks every weight to float. Supported: "
                + ", ".join(sorted(archs.ARCH_RULES))
            )

    def get_state_dict(self, checkpoint_file: str, model) -> dict:
        if self.legacy:
            from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

            return load_gguf_checkpoint(checkpoint_file, return_tensors=True, model_to_load=model, torch_dtype=self.dtype)[
                "tensors"
            ]
        names = self._plan.hf_names
        unused = [n for n in self._plan.unmatched if n != "rope_freqs.weight"]  # applied after loading
        if unused:
            logger.info(f"gguf_quant: tensors with no model parameter, not loaded: {', '.join(unused)}")
        return {name: self.gguf.raw(name) for name in names}

    # --- settling the model -------------------------------------------------------------------

    def update_device_map(self, device_map):
        places = device_map.values() if isinstance(device_map, dict) else [device_map]
        if "disk" in {str(p) for p in places}:
            raise ValueError("gguf_quant: offloading packed GGUF weights to disk is not supported; use cpu or a GPU")
        return device_map

    def update_dtype(self, dtype: torch.dtype | None) -> torch.dtype:
        # Quantized weights stay packed whatever the dtype; it only sets activations and the
        # few float tensors (norms, biases).
        self.dtype = torch.float32 if dtype is None else dtype
        return self.dtype

    def _process_model_before_weight_loading(self, model, **kwargs) -> None:
        if self.legacy:
            return
        if self.gguf is None:
            self._swap_for_checkpoint(model)
            return
        self._plan = plan = archs.plan_tensors(model, self.gguf)
        # Each parameter's quantized sources and their types (a fused expert gate_up has two).
        by_source = {hf: self.gguf.tensors[g].type for g, hf in plan.hf_names.items()}
        types: dict[str, dict[str, int]] = {}
        for hf in {*plan.hf_names.values(), *plan.merges} - {s for m in plan.merges.values() for s in m}:
            sources = {src: by_source[src].id for src in plan.sources(hf) if by_source[src].quantized}
            if sources:
                types[hf] = sources
        not_byte_safe = {}
        for hf in types:
            op = plan.conversion(hf)
            if op is not None and not getattr(op, "supports_packed", False):
                not_byte_safe[hf] = type(op).__name__
        cfg = self.quantization_config
        if cfg.dequantize:
            unpack, self.report = dict(types), PackingReport(unpacked={n: "dequantize=True" for n in types})
        else:
            unpack, self.report = swap_modules(model, types, self.dtype, not_byte_safe, cfg.skips)
        self.report.source = str(self.gguf.path)
        self.transforms = archs.weight_transforms(plan, unpack, self.dtype)

    def _swap_for_checkpoint(self, model) -> None:
        """A float checkpoint quantized as it loads, or a saved packed one reloaded."""
        cfg = self.quantization_config
        if self.pre_quantized:
            # (empty for a model saved after loading with dequantize=True: nothing to swap)
            types = dict(cfg.module_types)
            source = "saved packed checkpoint"
        elif cfg.quant_type:
            from .archs.export import gguf_arch

            arch = gguf_arch(model.config)
            types = model_types(model, cfg.quant_type, arch)
            for name in types:  # per-module overrides: a module name or a suffix of one
                module = name.rpartition(".")[0]
                for pattern, t in cfg.module_types.items():
                    if module == pattern or module.endswith("." + pattern):
                        types[name] = t
            source = f"quantized on load to {cfg.quant_type}"
        else:
            raise ValueError("GgufQuantizeConfig needs a gguf_file, a quant_type, or a saved packed checkpoint")
        ids = {name: {name: ggml_type(t).id} for name, t in types.items() if ggml_type(t).quantized}
        unpack, self.report = swap_modules(model, ids, self.dtype, {}, cfg.skips)
        self.report.source = source
        if self.pre_quantized:
            if unpack:
                raise ValueError(f"gguf_quant: saved packed weights with no packed module to hold them: {sorted(unpack)}")
            return
        self.to_quantize = {n: types[n] for n in self.report.packed if n in types}
        # gpt-oss's experts arrive in transformers' layout; GgufExperts quantizes llama.cpp's
        self.transforms = archs.experts_to_llamacpp(model, self.to_quantize, arch, float_weights=not self.mxfp4_experts)
        if self.mxfp4_experts:
            from_mxfp4 = archs.experts_from_mxfp4(model, self.to_quantize, arch, self.dtype)
            if not from_mxfp4:
                raise ValueError(f"gguf_quant: an mxfp4 checkpoint of architecture {arch!r}: only gpt-oss's MXFP4 experts can be read")
            self.transforms += from_mxfp4
            # their converters quantize themselves: transformers' Quantize would get the blocks cast to float
            done = {c.target_patterns[0] for c in from_mxfp4}
            self.to_quantize = {n: t for n, t in self.to_quantize.items() if n not in done}
            self.report.source += " from openai's MXFP4 experts"

    def update_weight_conversions(self, weight_conversions, model):
        if self.legacy:
            return weight_conversions
        if self.gguf is None:  # a safetensors checkpoint: its own conversions, then ours
            return weight_conversions + self.transforms
        # The model's own conversions describe safetensors checkpoints and match nothing here.
        return self.transforms

    def get_new_dtype(self, converter, param, dtype):
        """Cast float tensors to the model dtype as they load; leave blocks (and tensors whose
        conversion casts them itself, after working in the file's precision) alone."""
        if self.legacy:
            return dtype
        ops = getattr(converter, "operations", ())
        # a tensor, or a safetensors slice (reloading a saved packed checkpoint)
        floating = param.is_floating_point() if hasattr(param, "is_floating_point") else param.get_dtype().startswith(("F", "BF"))
        if not floating or any(isinstance(op, (NormPlusOne, Unpack)) for op in ops):
            return None
        return dtype

    def _process_model_after_weight_loading(self, model, **kwargs):
        model.gguf_report = self.report
        self._apply_rope_factors(model)
        # What a reload of `save_pretrained`'s output needs to rebuild the same modules.
        self.quantization_config.module_types = dict(self.report.packed)
        if self.gguf is not None:
            # The GGUF renamings must not be replayed in reverse when the model is saved.
            model._weight_conversions = None
            # The source file's metadata (tokenizer included), for `save_gguf` to write back.
            model.gguf_metadata = self.gguf.metadata
        elif self.transforms:
            # Nor the layout changes made before quantizing: the saved blocks stay in llama.cpp's layout.
            model._weight_conversions = [c for c in model._weight_conversions or [] if c not in self.transforms]
        if not self.legacy:
            if self.quantization_config.fuse_siblings:
                fuse_siblings(model)
            logger.info(f"{self.report}\ngguf_quant: loaded in {time.perf_counter() - self._started:.1f} s")
            if self.report.unpacked:
                logger.warning(str(self.report))
        return model

    def _apply_rope_factors(self, model) -> None:
        """Llama 3.1-style rope scaling stored as a `rope_freqs` tensor; kept in the config so a
        saved-and-reloaded model (and `save_gguf`) has it too."""
        text = model.config.get_text_config()
        if self.gguf is not None and "rope_freqs.weight" in self.gguf.tensors:
            text.rope_freq_factors = self.gguf.raw("rope_freqs.weight").float().tolist()
        factors = getattr(text, "rope_freq_factors", None)
        if factors is not None and text.rope_parameters.get("rope_type", "default") == "default":
            archs.apply_rope_factors(model, factors)

    def _dequantize(self, model, dtype=None):
        """`model.dequantize()`: every packed module back to the float module it replaced, weights
        unpacked as gguf-py unpacks them (in `dtype`, by default the model's)."""
        dtype = dtype or self.dtype or torch.float32
        n = unpack_modules(model, dtype)
        logger.info(f"gguf_quant: {n} packed modules unpacked to {dtype}")
        return model

    def get_state_dict_and_metadata(self, model):
        # stacked sibling weights share one buffer: handed over as host copies, not device clones
        return unshared_state_dict(model), {}

    # --- capabilities -------------------------------------------------------------------------

    def param_needs_quantization(self, model, param_name: str, **kwargs) -> bool:
        return param_name in self.to_quantize

    def get_quantize_ops(self):
        return Quantize(self.to_quantize)

    @property
    def is_trainable(self) -> bool:
        return False

    @property
    def is_compileable(self) -> bool:
        return True

    def is_serializable(self, safe_serialization=None) -> bool:
        return True


def _merge_checkpoint_config(merge):
    """Wrap transformers' `AutoHfQuantizer.merge_quantization_configs` so that a gpt-oss
    checkpoint quantized by openai (`quant_method: mxfp4` in config.json) loads with a
    `GgufQuantizeConfig(quant_type=...)`: transformers would refuse two config classes, so ours
    wins, marked for `GGUFQuantizer` to read the MXFP4 experts itself."""

    def merged(from_config, from_args):
        method = from_config.get("quant_method") if isinstance(from_config, dict) else getattr(from_config, "quant_method", None)
        if isinstance(from_args, GgufQuantizeConfig) and from_args.quant_type and method == "mxfp4":
            logger.info("gguf_quant: config.json's mxfp4 quantization_config replaced by the GgufQuantizeConfig passed")
            from_args.checkpoint_quant_method = "mxfp4"
            return from_args
        return merge(from_config, from_args)

    merged.gguf_quant_wrapped = True
    return merged


def accept_mxfp4_checkpoints() -> None:
    """Install `_merge_checkpoint_config` (idempotent)."""
    from transformers.quantizers.auto import AutoHfQuantizer

    merge = AutoHfQuantizer.merge_quantization_configs
    if not getattr(merge, "gguf_quant_wrapped", False):
        AutoHfQuantizer.merge_quantization_configs = staticmethod(_merge_checkpoint_config(merge))
