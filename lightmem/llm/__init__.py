"""LLM runtimes behind one protocol (local transformers, OpenAI-compatible HTTP, llama.cpp), the prompts of the roles and
the LTM passes that call them (``prompts``) and the strict JSON I/O around their answers (``jsonio``)."""
from lightmem.llm.base import LLM, GenerationError, UsageMeter
from lightmem.llm.openai_backend import OpenAICompatLLM
from lightmem.llm.transformers_backend import TransformersLLM

__all__ = ["LLM", "GenerationError", "UsageMeter", "OpenAICompatLLM", "TransformersLLM"]
