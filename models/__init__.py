"""The paper's models as chains of units (see models/registry.py)."""

from models.chain import ChainModel, ModelSpec
from models.registry import MODELS, build, build_original, model_names, size_names

__all__ = ["ChainModel", "ModelSpec", "MODELS", "build", "build_original", "model_names", "size_names"]
