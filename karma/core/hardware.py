"""Hardware: one machine as plain data, loaded from a YAML preset.

The performance model (docs/design.md, Simulator) needs only rates and capacities:
device memory, sustained compute rate (FP32, and optionally the tensor-core rate of
fp16 and bf16 GEMMs), device memory bandwidth, host<->device
bandwidth per direction, the host's optimizer-update rate, and the network.
Presets live in karma/presets/*.yaml with the source of every figure in a
comment; users pass their own file by path. Units in the file are the ones
datasheets use (GB, TFLOP/s, GB/s, us); the dataclass holds SI units
(bytes, FLOP/s, bytes/s, s) so that formulas need no conversion.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from karma.core.errors import KarmaError, number, text
from karma.core.files import read_text

PRESET_DIR = Path(__file__).parents[1] / "presets"

GB = 1e9
#: field in the file -> (field in Hardware, factor to SI). Every one is required.
FIELDS = {
    "device_memory_gb": ("device_memory", GB),
    "sustained_tflops": ("flops", 1e12),
    "device_memory_bw_gbs": ("memory_bw", GB),
    "h2d_gbs": ("h2d_bw", GB),
    "d2h_gbs": ("d2h_bw", GB),
    "host_update_gbs": ("host_update_bw", GB),
    "kernel_launch_us": ("kernel_launch", 1e-6),
    "gpus_per_node": ("gpus_per_node", 1),
    "intra_node_gbs": ("intra_node_bw", GB),
    "intra_node_latency_us": ("intra_node_latency", 1e-6),
    "inter_node_gbs": ("inter_node_bw", GB),
    "inter_node_latency_us": ("inter_node_latency", 1e-6),
}
OPTIONAL = {"link_duplex": "full", "description": ""}
INTEGERS = {"gpus_per_node"}
#: optional: the sustained tensor-core rate of 16-bit GEMMs and convolutions, per precision
#: (absent: 16-bit matrix work runs at the FP32 rate, as on a GPU without such units)
TENSOR_FIELDS = {
    "tensor_tflops_fp16": ("flops_fp16", 1e12),
    "tensor_tflops_bf16": ("flops_bf16", 1e12),
    # the narrowest GEMM dimension (m, n or k) at which a tensor-core GEMM runs at half its sustained
    # rate: efficiency d / (d + this) (absent: every tensor-core GEMM at the sustained rate)
    "tensor_half_rate_dim": ("tensor_half_dim", 1),
}
#: optional: the node's host memory bandwidth, which the link copies and host optimizer updates of all its
#: GPUs share (absent: not modelled, each rank's host is its own; karma/sim/simulate.py, host_memory_time)
HOST_FIELDS = {"host_memory_gbs": ("host_memory_bw", GB)}


@dataclass(frozen=True)
class Hardware:
    """One node type. Rates are sustained (achievable) figures, not peaks.

    `host_update_bw` is the bytes per second the host optimizer streams through
    memory (an Adam step touches ~7 fp32 values per parameter). `host_memory_bw`
    (0: not modelled) is the node's sustained host memory bandwidth: where it is
    given, `host_update_bw` is the node's rate, shared by the ranks that update at
    once (host_update_rate), and every rank's link copies and updates draw on that
    memory (karma/sim/simulate.py, host_memory_time); where it is not, each GPU has
    a host of its own updating at `host_update_bw`.
    `link_duplex` is 'full' (PCIe, NVLink-C2C: both directions at once) or
    'half' (one shared direction).
    """

    name: str
    device_memory: float
    flops: float
    memory_bw: float
    h2d_bw: float
    d2h_bw: float
    host_update_bw: float
    kernel_launch: float
    gpus_per_node: int
    intra_node_bw: float
    intra_node_latency: float
    inter_node_bw: float
    inter_node_latency: float
    link_duplex: str = "full"
    description: str = ""
    flops_fp16: float = 0.0
    flops_bf16: float = 0.0
    tensor_half_dim: float = 0.0
    host_memory_bw: float = 0.0

    def host_update_rate(self, ranks: int) -> float:
        """Bytes per second one rank's host optimizer streams while `ranks` ranks of its node update at
        once. Where the node's host is modelled (`host_memory_bw`), `host_update_bw` is the node's rate and
        its ranks split it (the update is bound by the node's memory, however its cores are shared out);
        otherwise `host_update_bw` is each GPU's own."""
        return self.host_update_bw / ranks if self.host_memory_bw else self.host_update_bw

    def matmul_flops(self, dtype: str, narrow: float = 0.0) -> float:
        """Sustained rate of GEMMs and convolutions computing in `dtype` ('float32', 'float16',
        'bfloat16'): the tensor-core rate of that precision where the preset gives one. With the
        GEMM's narrowest dimension `narrow` (m, n or k), a tensor-core rate falls as d / (d + d_half)
        (`tensor_half_dim`): narrow tiles leave tensor cores idle (Megatron's attention GEMMs over a
        head of 96, a tensor-parallel shard's 192 columns, ResNet's 64-channel convolutions).
        FP32 GEMMs keep the flat sustained rate (FP32 ResNet-50 on a V100 is calibrated with it)."""
        rate = {"float16": self.flops_fp16, "bfloat16": self.flops_bf16}.get(dtype, 0.0)
        if not rate or rate == self.flops:
            return self.flops
        if narrow and self.tensor_half_dim:
            rate *= narrow / (narrow + self.tensor_half_dim)
        return rate

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Hardware:
        return cls(**data)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def parse(data, name: str, where: str) -> Hardware:
    """Validate a mapping read from a preset file; one-line error naming the field."""
    if not isinstance(data, dict):
        raise KarmaError(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    unknown = set(data) - set(FIELDS) - set(TENSOR_FIELDS) - set(HOST_FIELDS) - set(OPTIONAL) - {"name"}
    if unknown:
        valid = sorted([*FIELDS, *TENSOR_FIELDS, *HOST_FIELDS, *OPTIONAL])
        raise KarmaError(f"{where}: unknown field '{sorted(unknown)[0]}'; valid: {', '.join(valid)}")
    values = {}
    try:
        for key, (attr, factor) in FIELDS.items():
            if key not in data:
                raise KarmaError(f"missing field '{key}'")
            values[attr] = number(data[key], key, positive=True, integer=key in INTEGERS) * factor
        for key, (attr, factor) in (TENSOR_FIELDS | HOST_FIELDS).items():
            if key in data:
                values[attr] = number(data[key], key, positive=True) * factor
        for key in ("name", "description"):
            if key in data:
                text(data[key], key)
    except KarmaError as err:
        raise KarmaError(f"{where}: {err}") from None
    duplex = data.get("link_duplex", OPTIONAL["link_duplex"])
    if duplex not in ("full", "half"):
        raise KarmaError(f"{where}: field 'link_duplex' must be 'full' or 'half', got {duplex!r}")
    return Hardware(name=data.get("name", name), link_duplex=duplex, description=data.get("description", ""),
                    **values)


def load(name_or_path: str | Path) -> Hardware:
    """A preset by name (see preset_names()) or a user's YAML file by path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = PRESET_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise KarmaError(f"unknown hardware '{name_or_path}'; valid: {', '.join(preset_names())} "
                             "or a path to a .yaml file")
    try:
        data = yaml.safe_load(read_text(path, "hardware"))
    except yaml.YAMLError as err:
        raise KarmaError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse(data, path.stem, str(path))


def figure_sources(name_or_path: str | Path, tensor_cores: bool = False) -> list[dict]:
    """Every figure of a preset with the comment above it (or beside it): where the number comes
    from, as the file says it (datasheet, measurement, or 'estimate'); the required fields, and
    with `tensor_cores` the tensor-core rates per precision too."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = PRESET_DIR / f"{name_or_path}.yaml"
    rows, comments = [], []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("# "))
            continue
        key, sep, rest = stripped.partition(":")
        if sep and (key in FIELDS or key in HOST_FIELDS or (tensor_cores and key in TENSOR_FIELDS)):
            value, _, beside = rest.partition("#")
            source = " ".join(comments + ([beside.strip()] if beside.strip() else []))
            if not source and rows:  # a figure right under another shares its comment
                source = f"as for {rows[-1]['field']}"
            rows.append({"field": key, "value": value.strip(), "source": source})
        if stripped:
            comments = []
    return rows
