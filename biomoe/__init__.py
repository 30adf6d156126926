"""biomoe: Mixture-of-Experts language models for genomes, trained with PyTorch Lightning."""

from biomoe.model.config import ConfigError, ModelConfig, OptimConfig
from biomoe.model.transformer import MoETransformer, ModelOutput

# Registers the expert backends biomoe ships (``te``, ``te_fused``; Transformer Engine itself is
# imported only when one computes), so a RuntimeConfig naming one is valid in any script.
import biomoe.backends  # noqa: E402,F401  isort: skip

__version__ = "0.1.0"
__all__ = ["ConfigError", "ModelConfig", "ModelOutput", "MoETransformer", "OptimConfig", "__version__"]
