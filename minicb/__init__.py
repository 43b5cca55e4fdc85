"""minicb: a compact LLM serving engine for learning continuous batching."""
from minicb.generate import generate
from minicb.model.loader import BARD_PATH, load_model
from minicb.runner import ModelRunner
from minicb.sampling import SamplingParams

__version__ = "0.1.0"
__all__ = ["BARD_PATH", "ModelRunner", "SamplingParams", "generate", "load_model"]
