"""PyTorch optimization workbench: configs, a training worker, events and run store, and the
notebook widgets on top. Import the pieces you need; nothing here imports torch eagerly."""
from .config import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig"]
__version__ = "0.1.0"
