"""Loaders for the conversation formats lightmem ingests and evaluates on."""
from lightmem.datasets.formats import Conversation, QAItem, Session, detect_format
from lightmem.datasets.loading import load_conversations
from lightmem.datasets.locomo import load_locomo, select_conversations

__all__ = ["Conversation", "QAItem", "Session", "detect_format", "load_conversations", "load_locomo", "select_conversations"]
