"""Argument types and shared options of the command line (karma/cli/main.py): positive finite numbers,
precisions, a model spec's options, and a parser whose usage errors are one line."""

from __future__ import annotations

import argparse

from karma.core.errors import KarmaError, number
from models.specs import is_spec, parse_set


def positive(parse, kind: str):
    """An argparse type: `parse` the text, then the value must be finite and > 0."""
    def convert(text: str):
        try:
            return number(parse(text), "", positive=True, integer=parse is int)
        except (ValueError, KarmaError):
            raise argparse.ArgumentTypeError(f"must be a positive {kind}, got {text!r}") from None
    return convert


positive_int = positive(int, "integer")
positive_float = positive(float, "number")


PRECISIONS = ["fp32", "fp16", "bf16"]
#: models.chain.GRANULARITIES, without importing torch to parse a command line (tests/cli/test_cli.py checks they agree)
GRANULARITIES = ["block", "layer"]
PRECISION_HELP = ("fp32, or mixed precision fp16 / bf16 (16-bit compute and activations, fp32 master weights "
                  "and optimizer state, loss scaling for fp16)")


def spec_options(args) -> dict | None:
    """A model spec's options from the command line (models/specs.py); None for a zoo name."""
    if not is_spec(args.model):
        if args.set or args.seq or args.input or args.units:
            raise KarmaError("--set, --seq, --input and --units are for model specs (torchvision:NAME, hf:..., "
                             "package.module:function), not the zoo's names")
        return None
    return {"set": parse_set(args.set), "seq": args.seq, "input": args.input, "units": args.units}


def add_spec_options(p) -> None:
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE",
                   help="model spec overrides: builder arguments (torchvision:, module:function) or config fields "
                        "(hf:), e.g. --set n_layer=48 n_embd=1600 n_head=25")
    p.add_argument("--seq", type=positive_int, help="hf: sequence length (default: its positions, at most 2048)")
    p.add_argument("--input", help="torchvision: input shape per sample (default 3x224x224)")
    p.add_argument("--units", type=positive_int,
                   help="model spec: merge the cut pieces into N units balanced in time and saved bytes")


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes print one line (and `--help` points further), not the whole usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
