"""minicb: a compact LLM serving engine for learning continuous batching."""
from minicb.config import EngineConfig
from minicb.engine import LLMEngine
from minicb.llm import LLM
from minicb.model.loader import BARD_PATH, load_model
from minicb.runner.model_runner import ModelRunner
from minicb.sampling import SamplingParams
from minicb.scheduler.request import CompletionOutput, RequestOutput, RequestStatus

__version__ = "0.1.0"
__all__ = ["BARD_PATH", "CompletionOutput", "EngineConfig", "LLM", "LLMEngine", "ModelRunner",
           "RequestOutput", "RequestStatus", "SamplingParams", "load_model"]
