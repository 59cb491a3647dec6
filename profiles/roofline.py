"""Roofline profiles: prefill, reload and decode costs from datasheet numbers.

Used for the shipped profiles of device/model pairs we cannot measure here. Each
is labelled ``source.kind = "roofline"`` with its assumptions; a measured profile
(``ttlctl profile``) replaces it where the hardware is at hand.

Model (dense bf16 transformer, tensor parallel over ``tp`` GPUs):

- prefill of c tokens: ``(2·P·c + 2·L·d·c²) / (tp · peak · mfu) + overhead``
  (matmuls over the weights, plus causal attention QKᵀ and AV: 2·L·d·c² FLOPs
  with d = heads × head_dim), a whole prefill-only step (``prefill.includes_step``:
  the overhead is the step's fixed cost; the replay adds no weight read on top).
  ``mfu`` is the device's measured prefill utilisation where one was measured
  (:attr:`Device.prefill_mfu`, with where it comes from), else the assumed
  :data:`MFU`;
- decode step: weights and KV read from HBM once per step:
  ``weight_bytes/(tp·hbm·eff)`` + ``per_kv_token = kv_bytes/(tp·hbm·eff)`` +
  ``per_seq = 2·P/(tp·peak·mfu)``;
- reload: host-to-device copy at the link's effective bandwidth plus a fixed
  latency per transfer;
- KV bytes per token: ``2 (K and V) · L · kv_heads · head_dim · dtype bytes``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from profiles.schema import Decode, Prefill, Profile, Reload


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    bf16_tflops: float  # dense
    hbm_tb_s: float
    memory_gb: float
    host_link_gb_s: float  # effective pinned host-to-device bandwidth
    datasheet: str
    #: prefill model-FLOPs utilisation measured on this device (None: the assumed MFU)
    prefill_mfu: float | None = None
    #: how and when prefill_mfu was measured
    prefill_mfu_measured: str = ""

    def __post_init__(self) -> None:
        if self.prefill_mfu is not None:
            if not 0.0 < self.prefill_mfu <= 1.0:
                raise ValueError(f"{self.name}: prefill_mfu {self.prefill_mfu} is not in (0, 1]")
            if not self.prefill_mfu_measured:
                raise ValueError(f"{self.name}: a measured prefill_mfu says how it was measured")


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    params_b: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    card: str
    notes: str = ""

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # bf16


#: the H200's measured prefill (docs/benchmarks.md, "The shipped H200 figures on an H200")
H200_PREFILL = (
    "median of 14 prefills of Llama-3.1-8B (random weights, bf16, 1k-131k tokens, two runs) "
    "on one H200 through eager torch with SDPA attention (bench/gpu_profile_check.py --torch, "
    "2026-12-04): 0.56-0.62 of the datasheet peak (Qwen3-8B, 2k-32k, read 0.53-0.55); "
    "vLLM's prefill runs the same matrix products. The H100 (the same compute) keeps the "
    "assumed utilisation: not measured"
)

DEVICES = {
    d.name: d
    for d in (
        Device("A100", 312.0, 2.039, 80, 24.0, "NVIDIA A100 80GB SXM datasheet; PCIe 4.0 x16"),
        Device("H100", 989.0, 3.35, 80, 50.0, "NVIDIA H100 SXM datasheet; PCIe 5.0 x16"),
        Device(
            "H200",
            989.0,
            4.8,
            141,
            50.0,
            "NVIDIA H200 SXM datasheet; PCIe 5.0 x16",
            prefill_mfu=0.58,
            prefill_mfu_measured=H200_PREFILL,
        ),
        Device("B200", 2250.0, 8.0, 192, 55.0, "NVIDIA B200 (HGX) datasheet; PCIe 5.0 x16"),
    )
}

MODELS = {
    m.name: m
    for m in (
        Model("Llama-3.1-8B", 8.03, 32, 32, 8, 128, 131072, "meta-llama/Llama-3.1-8B config.json"),
        Model(
            "Llama-3.1-70B", 70.6, 80, 64, 8, 128, 131072, "meta-llama/Llama-3.1-70B config.json"
        ),
        Model(
            "Gemma-3-12B",
            12.2,
            48,
            16,
            8,
            256,
            131072,
            "google/gemma-3-12b-it config.json",
            "5 of 6 layers use a 1,024-token sliding window; counted here as full attention, "
            "so KV bytes and long-context prefill are over-estimated",
        ),
        Model("Qwen3-8B", 8.19, 36, 32, 8, 128, 32768, "Qwen/Qwen3-8B config.json"),
        Model("Qwen3-32B", 32.8, 64, 64, 8, 128, 32768, "Qwen/Qwen3-32B config.json"),
    )
}

#: model-FLOPs utilisation typical of vLLM on large batches: prefill's where the device has
#: none measured (Device.prefill_mfu), and decode's per-sequence products on every device
MFU = 0.45
HBM_EFF = 0.8
PREFILL_OVERHEAD_S = 0.004
RELOAD_LATENCY_S = 50e-6
GRID = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def tensor_parallel(model: Model, device: Device) -> int:
    """Fewest GPUs (1, 2, 4, 8) whose memory holds the weights at ≤ 60% use."""
    for tp in (1, 2, 4, 8):
        if model.params_b * 2 <= 0.6 * device.memory_gb * tp:
            return tp
    return 8


def profile(model: Model, device: Device) -> Profile:
    tp = tensor_parallel(model, device)
    flops = tp * device.bf16_tflops * 1e12 * MFU
    prefill_mfu = MFU if device.prefill_mfu is None else device.prefill_mfu
    prefill_flops = tp * device.bf16_tflops * 1e12 * prefill_mfu
    hbm = tp * device.hbm_tb_s * 1e12 * HBM_EFF
    d = model.heads * model.head_dim
    b = 2 * model.params_b * 1e9 / prefill_flops
    q = 2 * model.layers * d / prefill_flops
    points = tuple(
        (c, PREFILL_OVERHEAD_S + b * c + q * c * c) for c in GRID if c <= model.max_context
    )
    return Profile(
        name=f"{model.name.lower()}-{device.name.lower()}",
        device=f"{tp}x {device.name}" if tp > 1 else device.name,
        model=model.name,
        kv_bytes_per_token=model.kv_bytes_per_token,
        max_context=model.max_context,
        prefill=Prefill(PREFILL_OVERHEAD_S, b, q, points, 0.0, includes_step=True),
        reload=Reload(device.host_link_gb_s * 1e9 * tp, RELOAD_LATENCY_S),
        decode=Decode(
            step_s=model.params_b * 2e9 / hbm,
            per_seq_s=2 * model.params_b * 1e9 / flops,
            per_kv_token_s=model.kv_bytes_per_token / hbm,
        ),
        source={
            "kind": "roofline",
            "how": "profiles/roofline.py: datasheet peak × utilisation, see its docstring",
            "assumptions": {
                "mfu": MFU,
                "prefill_mfu": prefill_mfu,
                "hbm_efficiency": HBM_EFF,
                "prefill_overhead_s": PREFILL_OVERHEAD_S,
                "reload_latency_s": RELOAD_LATENCY_S,
                "tensor_parallel": tp,
                "dtype": "bfloat16",
            },
            "device_datasheet": device.datasheet,
            "model_card": model.card,
            **(
                {"prefill_mfu_measured": device.prefill_mfu_measured}
                if device.prefill_mfu is not None
                else {}
            ),
            **({"notes": model.notes} if model.notes else {}),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the shipped roofline profiles.")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for model in MODELS.values():
        for device in DEVICES.values():
            p = profile(model, device)
            path = args.out / f"{p.name}.json"
            path.write_text(json.dumps(p.to_json(), indent=1) + "\n")
            print(path)


if __name__ == "__main__":
    main()
