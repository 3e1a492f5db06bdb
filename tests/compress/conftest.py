"""The examples' models as fixtures for the compression tests (tests/example_models.py)."""

from example_models import gpt, gpt2, resnet  # noqa: F401  (fixtures)
