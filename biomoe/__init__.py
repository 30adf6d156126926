"""biomoe: Mixture-of-Experts language models for genomes, trained with PyTorch Lightning."""

from biomoe.model.config import ConfigError, ModelConfig, OptimConfig
from biomoe.model.transformer import MoETransformer, ModelOutput

__version__ = "0.1.0"
__all__ = ["ConfigError", "ModelConfig", "ModelOutput", "MoETransformer", "OptimConfig", "__version__"]
